"""PipelineMonitorTensorDump (step kind `tensor_dump`) and PipelineMonitorTensorCompare
(step kind `tensor_compare`): write the tensors of a value to a .safetensors dump, compare dumps.

Dumps live in <ComfyUI output>/pipeline_monitor/dumps/ and are downloadable from
GET /pipeline_monitor/dumps/{name}. Names are checked twice: when the prompt is validated (a bad
name is a node error and nothing runs) and again before writing.
"""

from __future__ import annotations

import logging
import os
import time

from comfy_api.latest import io

from ..monitors.dumps.collect import collect_tensors, guess_encoder_family
from ..monitors.dumps.compare import compare_dump_with, compare_dumps
from ..monitors.dumps.files import (
    DumpError,
    DumpNameError,
    DumpTooLargeError,
    dump_file_name,
    list_dumps,
    write_dump,
)
from ..monitors.latent.analysis import describe_tensor_bounded
from ..monitors.report import Finding, StepReport, format_bytes
from . import dump_paths
from .node_support import record_step, upstream_node_ids
from .runtime import get_runtime

log = logging.getLogger(__name__)

VALUE_INPUTS = ("conditioning", "latent", "image")
LIVE_VALUE = "(live value)"
NO_DUMPS = "(no dumps yet)"
ROUTE = "/pipeline_monitor/dumps/"


def current_prompt_id() -> tuple[str | None, str | None]:
    """(prompt id, None), or (None, why it is unknown) for the step's monitor_errors."""
    reasons = []
    try:
        from comfy_execution.utils import get_executing_context

        context = get_executing_context()
        if context is not None:
            return context.prompt_id, None
    except Exception as exc:
        reasons.append(f"executing context: {type(exc).__name__}: {exc}")
    try:
        prompt_id = get_runtime().recorder.active_prompt_id
    except Exception as exc:
        reasons.append(f"recorder: {type(exc).__name__}: {exc}")
    else:
        if prompt_id is not None:
            return prompt_id, None
        reasons.append("no executing context and no active run")
    return None, "prompt id unknown: " + "; ".join(reasons)


def list_dump_names() -> tuple[list[str], str | None]:
    """(names of the existing dumps, None), or ([], why they could not be listed)."""
    try:
        return sorted(row["name"] for row in list_dumps(dump_paths.dumps_dir())), None
    except Exception as exc:  # no output folder yet, or ComfyUI not importable
        log.debug("pipeline monitor: dumps not listed: %s", exc)
        return [], f"dumps not listed: {type(exc).__name__}: {exc}"


def dump_choices() -> list[str]:
    """Names of the existing dumps for the combo lists, computed each time the schema is asked for."""
    return list_dump_names()[0]


def no_dump_chosen_message(lead: str) -> str:
    # The combo shows NO_DUMPS both when there is none and when listing failed: say which.
    _names, reason = list_dump_names()
    return lead if reason is None else f"{lead} ({reason})"


def value_inputs() -> list:
    return [
        io.Conditioning.Input("conditioning", optional=True),
        io.Latent.Input("latent", optional=True),
        io.Image.Input("image", optional=True),
    ]


def _sources(node_id, prompt) -> dict:
    sources = {}
    for name, source_id in upstream_node_ids(node_id, prompt, VALUE_INPUTS).items():
        source = prompt.get(source_id) if isinstance(prompt, dict) else None
        class_type = source.get("class_type") if isinstance(source, dict) else None
        sources[name] = {"node_id": source_id, "class_type": class_type}
    return sources


# -- dump ----------------------------------------------------------------------------------------


def dump_step(node_id, prompt, values: dict, name: str, npy: bool) -> StepReport:
    started = time.time()
    connected = [k for k in VALUE_INPUTS if values.get(k) is not None]
    collected = collect_tensors(**values)
    findings, details = [], {}
    sources = _sources(node_id, prompt)
    encoder_family = guess_encoder_family(values["conditioning"]) if values.get("conditioning") else None
    details["tensors"] = {t: describe_tensor_bounded(v) for t, v in collected.tensors.items()}
    details["extras"] = collected.extras
    details["skipped"] = collected.skipped
    details["sources"] = sources
    if collected.skipped:
        listed = ", ".join(f"{k} ({v})" for k, v in list(collected.skipped.items())[:8])
        findings.append(Finding("info", f"Not tensors, not dumped: {listed}.", "not_dumped"))
    for t, info in details["tensors"].items():
        if info.get("n_nan") or info.get("n_inf"):
            findings.append(
                Finding(
                    "warning", f"{t} holds {info['n_nan']} NaN and {info['n_inf']} Inf values.", "non_finite"
                )
            )
    result, monitor_errors = None, []
    if not connected:
        findings.append(
            Finding(
                "info",
                "Nothing connected: connect a CONDITIONING, LATENT or IMAGE to dump it.",
                "nothing_connected",
            )
        )
    else:
        prompt_id, prompt_id_unknown_reason = current_prompt_id()
        if prompt_id_unknown_reason is not None:
            monitor_errors.append(prompt_id_unknown_reason)
        metadata = {
            "prompt_id": prompt_id,
            "dump_node_id": node_id,
            "source_nodes": sources,
            "value_kinds": ",".join(connected),
            "encoder_family": encoder_family,
        }
        try:
            result = write_dump(dump_paths.dumps_dir(), name, collected, metadata, npy=npy)
        except DumpError as exc:
            code = (
                "name_refused"
                if isinstance(exc, DumpNameError)
                else "too_large"
                if isinstance(exc, DumpTooLargeError)
                else "not_written"
            )
            findings.append(Finding("error", str(exc), code))
        except OSError as exc:
            findings.append(Finding("error", f"Dump not written: {type(exc).__name__}: {exc}", "not_written"))
    if result is not None and result.replaced:
        findings.append(Finding("info", f"Replaced the earlier dump {result.file_name}.", "replaced"))
    summary = {
        "file_name": None if result is None else result.file_name,
        "written": result is not None,
        "n_tensors": len(collected.tensors),
        "tensor_bytes": collected.total_bytes,
        "file_bytes": None if result is None else result.file_bytes,
        "write_s": None if result is None else result.write_s,
        "n_npy_files": None if result is None else len(result.npy_files),
        "value_kinds": connected,
        "encoder_family": encoder_family,
    }
    if result is not None:
        details["download_url"] = ROUTE + result.file_name
        details["npy_files"] = list(result.npy_files)
        details["metadata"] = {k: v for k, v in result.metadata.items() if k != "tensors"}
    return StepReport(
        kind="tensor_dump",
        node_id=node_id,
        summary=summary,
        details=details,
        findings=tuple(findings),
        monitor_errors=tuple(monitor_errors),
        created_unix_s=started,
    )


def dump_ui_text(step: StepReport) -> str:
    s = step.summary
    if s.get("written"):
        return f"dumped {s['n_tensors']} tensors to {s['file_name']} ({format_bytes(s['file_bytes'])})"
    errors = [f.message for f in step.findings if f.level == "error"]
    return ("dump refused: " + errors[0]) if errors else "nothing dumped: connect a value"


class PipelineMonitorTensorDump(io.ComfyNode):
    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="PipelineMonitorTensorDump",
            display_name="Pipeline Monitor: Tensor Dump",
            category="pipeline_monitor",
            description="Passes CONDITIONING, LATENT and IMAGE through unchanged and writes every tensor "
            "in them to one .safetensors file (with metadata) in output/pipeline_monitor/dumps/.",
            inputs=[
                *value_inputs(),
                io.String.Input("name", default="pm_dump", tooltip="File name (letters, digits, . _ -)."),
                io.Boolean.Input("npy", default=False, tooltip="Also write one .npy file per tensor."),
            ],
            outputs=[
                io.Conditioning.Output(display_name="conditioning"),
                io.Latent.Output(display_name="latent"),
                io.Image.Output(display_name="image"),
            ],
            hidden=[io.Hidden.unique_id, io.Hidden.prompt],
            is_output_node=True,
        )

    @classmethod
    def validate_inputs(cls, name):
        try:
            dump_file_name(name)
        except DumpError as exc:
            return str(exc)
        return True

    @classmethod
    def execute(cls, name="pm_dump", npy=False, conditioning=None, latent=None, image=None) -> io.NodeOutput:
        hidden = getattr(cls, "hidden", None)
        node_id = getattr(hidden, "unique_id", None)
        prompt = getattr(hidden, "prompt", None)
        ui = None
        try:
            values = {"conditioning": conditioning, "latent": latent, "image": image}
            step = dump_step(node_id, prompt, values, name, bool(npy))
            record_step(step)
            ui = {"text": [dump_ui_text(step)]}
            if step.summary.get("written"):
                ui["dump"] = [step.summary["file_name"]]
        except Exception as exc:  # monitoring never fails the prompt
            log.exception("pipeline monitor: tensor dump failed")
            record_step(
                StepReport(
                    kind="tensor_dump", node_id=node_id, monitor_errors=(f"{type(exc).__name__}: {exc}",)
                )
            )
            ui = {"text": [f"dump failed: {type(exc).__name__}: {exc}"]}
        return io.NodeOutput(conditioning, latent, image, ui=ui)


# -- compare -------------------------------------------------------------------------------------


def compare_step(node_id, dump_a: str, dump_b: str, rtol: float, atol: float, values: dict) -> StepReport:
    started = time.time()
    findings, result = [], None
    live = collect_tensors(**values)
    try:
        directory = dump_paths.dumps_dir()
        if dump_a == NO_DUMPS:
            raise DumpError(
                no_dump_chosen_message("No dump chosen: write one with Pipeline Monitor: Tensor Dump first.")
            )
        name_a = dump_file_name(dump_a)
        if dump_b == LIVE_VALUE:
            if not live.tensors:
                raise DumpError(f"dump_b is {LIVE_VALUE}, but no CONDITIONING, LATENT or IMAGE is connected.")
            result = compare_dump_with(directory, name_a, live.tensors, rtol, atol)
        else:
            if live.tensors:
                findings.append(
                    Finding("info", "The live input is ignored: dump_b names a dump.", "live_ignored")
                )
            result = compare_dumps(directory, name_a, dump_file_name(dump_b), rtol, atol)
    except DumpError as exc:
        findings.append(Finding("error", str(exc), "compare_failed"))
    if result is not None:
        level = {"identical": "info", "close": "info", "different": "warning"}.get(result["status"], "error")
        findings.append(Finding(level, result["verdict"], result["status"]))
        summary = {
            "status": result["status"],
            "verdict": result["verdict"],
            "dump_a": dump_a,
            "dump_b": dump_b,
            "rtol": rtol,
            "atol": atol,
            "n_compared": result["n_compared"],
            "n_different": result["n_different"],
            "n_incompatible": result["n_incompatible"],
            "max_abs_diff": result["max_abs_diff"],
            "max_relative_error": result["max_relative_error"],
            "min_cosine_similarity": result["min_cosine_similarity"],
        }
        details = {k: result[k] for k in ("tensors", "only_in_a", "only_in_b", "a", "b")}
    else:
        message = findings[-1].message if findings else "comparison failed"
        summary = {"status": "error", "verdict": f"error: {message}", "dump_a": dump_a, "dump_b": dump_b}
        details = {}
    return StepReport(
        kind="tensor_compare",
        node_id=node_id,
        summary=summary,
        details=details,
        findings=tuple(findings),
        created_unix_s=started,
    )


def _file_state(name: str) -> str:
    try:
        info = os.stat(os.path.join(dump_paths.dumps_dir(), dump_file_name(name)))
        return f"{name}:{info.st_mtime_ns}:{info.st_size}"
    except Exception as exc:  # only a cache key: the compare step itself reports why the file is unusable
        return f"{name}:missing:{type(exc).__name__}"


class PipelineMonitorTensorCompare(io.ComfyNode):
    @classmethod
    def define_schema(cls) -> io.Schema:
        choices = dump_choices()  # recomputed whenever ComfyUI asks for the schema (object_info)
        return io.Schema(
            node_id="PipelineMonitorTensorCompare",
            display_name="Pipeline Monitor: Tensor Compare",
            category="pipeline_monitor",
            description="Compares two dumps, or a dump and a live value, tensor by tensor: shape and "
            "dtype match, max/mean absolute difference, relative error, cosine similarity and allclose "
            "at rtol/atol, with a one-line verdict. dump_a is the reference.",
            inputs=[
                io.Combo.Input("dump_a", options=choices or [NO_DUMPS], tooltip="The reference dump."),
                io.Combo.Input(
                    "dump_b",
                    options=[LIVE_VALUE, *choices],
                    default=LIVE_VALUE,
                    tooltip=f"A second dump, or {LIVE_VALUE} to compare with the connected value.",
                ),
                io.Float.Input("rtol", default=1e-5, min=0.0, max=1e3, step=1e-6, round=False),
                io.Float.Input("atol", default=1e-8, min=0.0, max=1e6, step=1e-8, round=False),
                *value_inputs(),
            ],
            outputs=[],
            hidden=[io.Hidden.unique_id],
            is_output_node=True,
        )

    @classmethod
    def validate_inputs(cls, dump_a, dump_b):
        # Replaces ComfyUI's "value not in list" check for these two, so a dump written earlier in
        # the same prompt, or by the API under any valid name, can be compared.
        if dump_a == NO_DUMPS:
            return no_dump_chosen_message(
                "No dump to compare yet: write one with Pipeline Monitor: Tensor Dump first."
            )
        for value in (dump_a,) if dump_b == LIVE_VALUE else (dump_a, dump_b):
            try:
                dump_file_name(value)
            except DumpError as exc:
                return str(exc)
        return True

    @classmethod
    def fingerprint_inputs(cls, dump_a=None, dump_b=None, rtol=None, atol=None, **kwargs):
        # No outputs, so re-running never re-runs anything else; re-run when a dump file changed.
        return f"{_file_state(str(dump_a))}|{_file_state(str(dump_b))}|{rtol}|{atol}"

    @classmethod
    def execute(
        cls, dump_a, dump_b=LIVE_VALUE, rtol=1e-5, atol=1e-8, conditioning=None, latent=None, image=None
    ) -> io.NodeOutput:
        hidden = getattr(cls, "hidden", None)
        node_id = getattr(hidden, "unique_id", None)
        try:
            values = {"conditioning": conditioning, "latent": latent, "image": image}
            step = compare_step(node_id, dump_a, dump_b, float(rtol), float(atol), values)
            record_step(step)
            text = step.summary["verdict"]
        except Exception as exc:  # monitoring never fails the prompt
            log.exception("pipeline monitor: tensor compare failed")
            record_step(
                StepReport(
                    kind="tensor_compare", node_id=node_id, monitor_errors=(f"{type(exc).__name__}: {exc}",)
                )
            )
            text = f"compare failed: {type(exc).__name__}: {exc}"
        return io.NodeOutput(ui={"text": [text]})
