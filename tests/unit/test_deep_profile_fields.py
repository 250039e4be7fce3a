"""The deep profile's row declarations (monitors/deep_profile/summary.py) say which fields may be
null: a built row is null exactly there when nothing is known, and never elsewhere."""

from __future__ import annotations

from monitors.deep_profile import analysis
from monitors.deep_profile.session import range_name
from monitors.deep_profile.summary import NODE_FIELDS, TOP_OP_FIELDS

from .test_deep_profile import cuda_prompt, ev


def nulls(row, fields) -> set[str]:
    return {f.name for f in fields if row.get(f.name) is None}


def nullable(fields) -> set[str]:
    return {f.name for f in fields if f.nullable}


def test_a_row_knowing_the_least_is_null_exactly_where_declared():
    """No CUDA, a node of unknown class whose only op took no measurable time."""
    node = ev(range_name("4", None), 0, 100, eid=1)
    instant = ev("aten::empty", 10, 10, node, eid=2)
    (row,) = analysis.node_rows(analysis.attribute([node, instant], {node.name: ("4", None)}), cuda=False)
    assert nulls(row, NODE_FIELDS) == nullable(NODE_FIELDS)
    (op,) = row["top_ops"]
    assert nulls(op, TOP_OP_FIELDS) == nullable(TOP_OP_FIELDS)


def test_rows_with_cuda_have_every_field():
    events, ranges = cuda_prompt()
    rows = analysis.node_rows(analysis.attribute(events, ranges), cuda=True)
    assert rows and all(nulls(row, NODE_FIELDS) == set() for row in rows)
    assert all(nulls(op, TOP_OP_FIELDS) == set() for row in rows for op in row["top_ops"])
