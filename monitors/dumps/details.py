"""The `tensor_dump` and `tensor_compare` steps' details: the one declaration of their keys (see
monitors/detail_fields.py)."""

from __future__ import annotations

from ..detail_fields import DetailGroup, details_of
from ..summary_fields import SummaryField as F

# The dump's file write, on the writer thread after the node returned (monitors/dumps/write_step.py)
WRITE = DetailGroup(
    "write",
    "file write",
    "how and when the dump's file was written",
    (
        F(
            "state",
            "write state",
            None,
            "pending (being written), written or not_written",
            "string",
            choices=("pending", "written", "not_written"),
        ),
        F("background", "written in the background", None, "written by the writer thread, after the node returned", "boolean"),
        F("in_prompt_s", "write time in the prompt", "s", "the node's own time on the write (the copies)", "number"),
        F("written_unix_s", "written at", "s", "when the file was complete (Unix time)", "number"),
        F("copy_wait_s", "copy wait", "s", "the writer's wait for the device copies", "number"),
        F("reason", "reason", None, "why not written, or why written in the prompt", "string"),
    ),
)

TENSOR_DUMP_DETAILS = details_of(
    "tensor_dump",
    (
        F("tensors", "tensors", None, "name -> the tensor collected, described", "object"),
        F("extras", "other values", None, "name -> a value that is not a tensor, described", "object"),
        F("skipped", "skipped", None, "name -> why the value was not collected", "object"),
        F("sources", "sources", None, "input -> the node that produced it", "object"),
        F("download_url", "download", None, "where the panel downloads the dump", "string"),
        F("npy_files", "npy files", None, ".npy files written next to the dump", "array"),
        F("metadata", "metadata", None, "the dump's metadata as written (without its tensors)", "object"),
        WRITE,
    ),
    "what the tensor dump collected and wrote",
)

# Where the comparison ran: on the writer thread after the node returned, or in the prompt
# (monitors/dumps/compare_step.py)
WORK = DetailGroup(
    "work",
    "comparison run",
    "where and when the comparison ran",
    (
        F(
            "state",
            "comparison state",
            None,
            "pending (being compared) or done",
            "string",
            choices=("pending", "done"),
        ),
        F(
            "background",
            "compared in the background",
            None,
            "compared on the dump writer's thread after the node returned",
            "boolean",
        ),
        F(
            "in_prompt_s",
            "time in the prompt",
            "s",
            "the node's own time on the comparison (the copies of the live values, or all of it)",
            "number",
        ),
        F("finished_unix_s", "finished at", "s", "when the comparison was done (Unix time)", "number"),
        F("reason", "reason", None, "why the comparison ran in the prompt", "string"),
    ),
)

TENSOR_COMPARE_DETAILS = details_of(
    "tensor_compare",
    (
        F("tensors", "tensors", None, "name -> the comparison of the tensor in both dumps", "object"),
        F("only_in_a", "only in a", None, "tensors only in the reference dump", "array"),
        F("only_in_b", "only in b", None, "tensors only in the other dump", "array"),
        F("a", "dump a", None, "the reference dump's metadata", "object"),
        F("b", "dump b", None, "the other dump's metadata, or the live value's", "object"),
        WORK,
    ),
    "the comparison per tensor and the two dumps compared",
)
