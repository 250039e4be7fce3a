import assert from "node:assert/strict";
import { test } from "node:test";
import { historyLimit } from "../../web/lib/compare.mjs";

// A skewed history, whose median (10) is not its mean (10.07): the rule is the median's, as the
// command line's (monitors/cli/aggregate.py history_limit; tests/unit/test_cli_aggregate.py).
test("the history rule rests on the median of the earlier runs, not their mean", () => {
  const { limit, nRuns } = historyLimit([10, 10.2, 10], "seconds");
  assert.equal(nRuns, 3);
  assert.ok(Math.abs(/** @type {number} */ (limit) - 11) < 1e-9, String(limit)); // 10 x 1.1, above 10.2 + 0.2
});
