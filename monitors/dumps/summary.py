"""The `tensor_dump` and `tensor_compare` steps' summaries: the records monitors/dumps/report.py
constructs, and their vocabularies (see monitors/vocabulary/registry.py)."""

from __future__ import annotations

from dataclasses import dataclass

from ..summary_fields import StepRecord, figure


@dataclass(frozen=True, kw_only=True)
class TensorDumpSummary(StepRecord):
    """The `tensor_dump` step's summary."""

    file_name: str | None = figure("file", None, "the dump's file name", headline=True)
    written: bool | None = figure("written", None, "the dump file was written", headline=True)
    n_tensors: int | None = figure("tensors", "count", "tensors collected from the inputs", headline=True)
    tensor_bytes: int | None = figure("tensor size", "bytes", "bytes of the tensors", headline=True)
    file_bytes: int | None = figure("file size", "bytes", "bytes of the written file", headline=True)
    write_s: float | None = figure("write time", "s", "time to write the file(s)", headline=True)
    value_kinds: list | None = figure(
        "values",
        None,
        "connected inputs (conditioning, latent, image)",
        headline=True,
    )
    encoder_family: str | None = figure(
        "encoder family",
        None,
        "text encoder family of the conditioning",
        headline=True,
    )
    n_npy_files: int | None = figure("npy files", "count", ".npy files written next to the dump")


TENSOR_DUMP = TensorDumpSummary.vocabulary("tensor_dump", "Tensor dump")


@dataclass(frozen=True, kw_only=True)
class TensorCompareSummary(StepRecord):
    """The `tensor_compare` step's summary."""

    status: str | None = figure(
        "status",
        None,
        "identical, close, different, incompatible or error",
        headline=True,
    )
    verdict: str | None = figure("verdict", None, "the comparison in one line", headline=True)
    n_compared: int | None = figure("tensors compared", "count", "tensors present in both", headline=True)
    n_different: int | None = figure("different", "count", "tensors not close at rtol/atol", headline=True)
    n_incompatible: int | None = figure("incompatible", "count", "tensors whose shapes differ", headline=True)
    max_abs_diff: float | None = figure(
        "max abs difference",
        None,
        "largest absolute difference",
        headline=True,
    )
    max_relative_error_ratio: float | None = figure(
        "max relative error",
        "fraction",
        "largest relative error",
        headline=True,
    )
    min_cosine_similarity: float | None = figure(
        "min cosine similarity",
        None,
        "smallest cosine similarity",
        headline=True,
    )
    dump_a: str | None = figure("dump a", None, "the reference dump", headline=True)
    dump_b: str | None = figure("dump b", None, "the other dump, or the live value", headline=True)
    rtol: float | None = figure("rtol", None, "relative tolerance")
    atol: float | None = figure("atol", None, "absolute tolerance")


TENSOR_COMPARE = TensorCompareSummary.vocabulary(
    "tensor_compare", "Tensor compare", v1_renames={"max_relative_error": "max_relative_error_ratio"}
)
