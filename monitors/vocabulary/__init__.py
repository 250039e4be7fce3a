"""One metric vocabulary: every step kind declares its summary fields once, in
`monitors/<kind>/summary.py` (in `monitors/summary_fields.py`'s terms), and everything else is
derived from that declaration: the per-kind `summary` definitions of
`schemas/run_report.schema.json`, the labels and units of the HTML report and of the panel
(`web/lib/vocabulary.generated.mjs`), the node's UI text, and the key renames applied when an older
report is read.

- `registry.py`: kind -> its declaration, and the lookups by kind (field, label, key order);
- `memory_rows.py`: the rows of a step's memory table and a node row's GPU figures;
- `formatting.py`: values with their units for people (HTML report and node text);
- `headline.py`: a monitor node's UI text from its kind's headline figures;
- `upgrade.py`: reports of older schema versions in the current names;
- `generated_files.py`, `metrics_reference.py` (with its `reference_*.py` rows): the files generated from the declarations
  (`python -m monitors.vocabulary.generated_files --write`, `--check` exits 1 when one is stale).

The registry imports every stage's declaration, so this room sits above the stages: a stage
declares with `monitors/summary_fields.py` and never imports the vocabulary.
"""
