"""The `tensor_compare` step off the prompt's path.

The node takes host copies of the live values (writer.run_after_writes: on a GPU a non-blocking
copy on the current stream, nothing read back) and returns with a pending step; the dump writer's
thread compares them after the dumps handed to it before (so a dump written earlier in the prompt
is complete when it is read), and finish_compare_step makes the finished step that replaces the
pending one. The prompt's end waits for the writer's work (writer.finish_pending_writes), so the
run report holds the finished comparison, as it holds the finished dumps.

Where the writer cannot take it (the live values' copies would go above the cap on bytes in flight,
or the writer is off), the comparison runs in the prompt as before, after the pending writes, and
`details.work.reason` says why. Off the prompt the live values' copies are compared on the CPU
with the file's tensors: no device memory is held for the comparison.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping

from ..report import StepReport, failed_step
from .collect import collect_tensors
from .details import TENSOR_COMPARE_DETAILS, WORK
from .report import LIVE_VALUE, build_compare_step
from .summary import TensorCompareSummary
from .writer import FINISH_WRITES_S, DumpTicket, DumpWriter

STEP_KIND = "tensor_compare"


def start_compare_step(
    node_id,
    dump_a: str,
    dump_b: str,
    rtol: float,
    atol: float,
    values: Mapping,
    *,
    directory: str,
    writer: DumpWriter,
) -> tuple[StepReport, DumpTicket | None]:
    """(the pending step, its ticket) once the writer compares, or (the finished step, None) where
    the comparison ran here. The ticket's outcome is the finished step (finish_compare_step)."""
    started = time.perf_counter()
    live = collect_tensors(**values)
    compared_live = dump_b == LIVE_VALUE
    # names only where dump_b names a dump: the step says the live input is ignored
    names_only = None if compared_live else dict.fromkeys(live.tensors)

    def compare(copies: Mapping) -> StepReport:
        try:
            return build_compare_step(
                node_id,
                dump_a,
                dump_b,
                rtol,
                atol,
                {},
                directory=directory,
                live_tensors=copies if compared_live else names_only,
            )
        except Exception as exc:  # monitoring never fails: the step says why
            return failed_step(STEP_KIND, node_id, exc)

    ticket, reason = writer.run_after_writes(compare, live.tensors if compared_live else {})
    if ticket is None:
        writer.join(FINISH_WRITES_S)  # a dump written earlier in this prompt is complete before it is read
        step = build_compare_step(
            node_id, dump_a, dump_b, rtol, atol, {}, directory=directory, live_tensors=live.tensors
        )
        work = {"state": "done", "background": False, "reason": reason}
        return _with_work(
            step, in_prompt_s=time.perf_counter() - started, finished_unix_s=time.time(), **work
        ), None
    summary = TensorCompareSummary(dump_a=dump_a, dump_b=dump_b, rtol=rtol, atol=atol)
    pending = StepReport(
        kind=STEP_KIND,
        node_id=node_id,
        summary=summary.to_dict(),
        details=TENSOR_COMPARE_DETAILS.build(),
        pending=True,
        created_unix_s=time.time(),
    )
    return _with_work(
        pending, state="pending", background=True, in_prompt_s=time.perf_counter() - started
    ), ticket


def finish_compare_step(pending: StepReport, outcome: StepReport | None) -> StepReport:
    """The finished step in place of the pending one: the comparison the writer made, with the
    pending step's time in the prompt; or the pending step left unfinished where the work failed
    without a step (the writer logged why)."""
    in_prompt_s = ((pending.details or {}).get("work") or {}).get("in_prompt_s")
    if outcome is None:
        return dataclasses.replace(
            pending,
            pending=False,
            unfinished_reason="the comparison failed on the dump writer's thread (see the server log)",
        )
    work = {"state": "done", "background": True, "in_prompt_s": in_prompt_s, "finished_unix_s": time.time()}
    return dataclasses.replace(_with_work(outcome, **work), created_unix_s=pending.created_unix_s)


def _with_work(step: StepReport, **work) -> StepReport:
    details = TENSOR_COMPARE_DETAILS.build(**{**(step.details or {}), "work": WORK.build(**work)})
    return dataclasses.replace(step, details=details)


def compared_after_return(step) -> bool:
    """Whether a `tensor_compare` step was compared on the writer's thread, after its node
    returned (the node's text then said the verdict would follow)."""
    work = (step.details or {}).get("work") if step.kind == STEP_KIND else None
    return isinstance(work, Mapping) and bool(work.get("background"))
