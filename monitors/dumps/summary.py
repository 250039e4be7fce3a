"""The `tensor_dump` and `tensor_compare` steps' summary fields: the one declaration (see
monitors/vocabulary/registry.py)."""

from __future__ import annotations

from ..summary_fields import StepKindVocabulary, SummaryField

TENSOR_DUMP = StepKindVocabulary(
    kind="tensor_dump",
    title="Tensor dump",
    fields=(
        SummaryField("file_name", "file", None, "the dump's file name", "string", headline=True),
        SummaryField("written", "written", None, "the dump file was written", "boolean", headline=True),
        SummaryField(
            "n_tensors", "tensors", "count", "tensors collected from the inputs", "integer", headline=True
        ),
        SummaryField(
            "tensor_bytes", "tensor size", "bytes", "bytes of the tensors", "integer", headline=True
        ),
        SummaryField(
            "file_bytes", "file size", "bytes", "bytes of the written file", "integer", headline=True
        ),
        SummaryField("write_s", "write time", "s", "time to write the file(s)", "number", headline=True),
        SummaryField(
            "value_kinds",
            "values",
            None,
            "connected inputs (conditioning, latent, image)",
            "array",
            headline=True,
        ),
        SummaryField(
            "encoder_family",
            "encoder family",
            None,
            "text encoder family of the conditioning",
            "string",
            headline=True,
        ),
        SummaryField("n_npy_files", "npy files", "count", ".npy files written next to the dump", "integer"),
    ),
)

TENSOR_COMPARE = StepKindVocabulary(
    kind="tensor_compare",
    title="Tensor compare",
    fields=(
        SummaryField(
            "status",
            "status",
            None,
            "identical, close, different, incompatible or error",
            "string",
            headline=True,
        ),
        SummaryField("verdict", "verdict", None, "the comparison in one line", "string", headline=True),
        SummaryField(
            "n_compared", "tensors compared", "count", "tensors present in both", "integer", headline=True
        ),
        SummaryField(
            "n_different", "different", "count", "tensors not close at rtol/atol", "integer", headline=True
        ),
        SummaryField(
            "n_incompatible", "incompatible", "count", "tensors whose shapes differ", "integer", headline=True
        ),
        SummaryField(
            "max_abs_diff", "max abs difference", None, "largest absolute difference", "number", headline=True
        ),
        SummaryField(
            "max_relative_error_ratio",
            "max relative error",
            "fraction",
            "largest relative error",
            "number",
            headline=True,
        ),
        SummaryField(
            "min_cosine_similarity",
            "min cosine similarity",
            None,
            "smallest cosine similarity",
            "number",
            headline=True,
        ),
        SummaryField("dump_a", "dump a", None, "the reference dump", "string", headline=True),
        SummaryField("dump_b", "dump b", None, "the other dump, or the live value", "string", headline=True),
        SummaryField("rtol", "rtol", None, "relative tolerance", "number"),
        SummaryField("atol", "atol", None, "absolute tolerance", "number"),
    ),
    v1_renames={"max_relative_error": "max_relative_error_ratio"},
)
