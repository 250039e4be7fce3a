"""PipelineMonitorTensorDump (step kind `tensor_dump`) and PipelineMonitorTensorCompare
(step kind `tensor_compare`): write the tensors of a value to a .safetensors dump, compare dumps.

Dumps live in <ComfyUI output>/pipeline_monitor/dumps/ and are downloadable from
GET /pipeline_monitor/dumps/{name}. Names are checked twice: when the prompt is validated (a bad
name is a node error and nothing runs) and again before writing.
"""

from __future__ import annotations

import logging
import threading

from comfy_api.latest import io

from ..monitors.dumps import TENSOR_COMPARE_STAGE, TENSOR_DUMP_STAGE
from ..monitors.dumps.compare_step import finish_compare_step, start_compare_step
from ..monitors.dumps.report import (
    LIVE_VALUE,
    NO_DUMPS,
    compare_inputs_problem,
    dump_name_problem,
    dump_names,
    file_state,
    start_dump_step,
    written_file_name,
)
from ..monitors.dumps.write_step import finish_dump_step
from ..monitors.dumps.writer import DUMP_WRITER
from ..monitors.vocabulary.headline import step_text
from . import dump_paths
from .deferred_work import send_step_text, step_text_context
from .node_support import hidden_inputs, run_monitor
from .runtime import get_runtime

log = logging.getLogger(__name__)


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


def dump_choices() -> list[str]:
    """Names of the existing dumps for the combo lists, computed each time the schema is asked for."""
    try:
        names, reason = dump_names(dump_paths.dumps_dir())
    except Exception as exc:  # ComfyUI's folders not importable (tools, tests)
        names, reason = [], f"{type(exc).__name__}: {exc}"
    if reason is not None:
        log.debug("pipeline monitor: %s", reason)
    return names


def value_inputs() -> list:
    return [
        io.Conditioning.Input("conditioning", optional=True),
        io.Latent.Input("latent", optional=True),
        io.Image.Input("image", optional=True),
    ]


class PipelineMonitorTensorDump(io.ComfyNode):
    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id=TENSOR_DUMP_STAGE.node,
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
        return dump_name_problem(name) or True

    @classmethod
    def execute(cls, name="pm_dump", npy=False, conditioning=None, latent=None, image=None) -> io.NodeOutput:
        node_id, prompt = hidden_inputs(cls)
        values = {"conditioning": conditioning, "latent": latent, "image": image}

        tickets = []

        def build():
            prompt_id, unknown_reason = current_prompt_id()
            step, ticket = start_dump_step(
                node_id,
                prompt,
                values,
                name,
                bool(npy),
                directory=dump_paths.dumps_dir(),
                writer=DUMP_WRITER,
                prompt_id=prompt_id,
                prompt_id_unknown_reason=unknown_reason,
            )
            tickets.append(ticket)
            return step

        step, ui = run_monitor(TENSOR_DUMP_STAGE.kind, node_id, build)
        if tickets and tickets[0] is not None:  # written on the writer thread: the step follows
            tickets[0].on_done(lambda outcome, pending=step: replace_finished(pending, outcome))
        file_name = written_file_name(step)
        if file_name is not None:
            ui["dump"] = [file_name]
        return io.NodeOutput(conditioning, latent, image, ui=ui)


def replace_finished(pending, outcome) -> None:
    """The finished dump step in place of the pending one, while its run is active
    (profile_hook lets the writer finish before a run ends: writer.finish_pending_writes)."""
    if not get_runtime().recorder.replace_step(pending, finish_dump_step(pending, outcome)):
        log.info("pipeline monitor: dump %s finished after its run ended", written_file_name(pending))


class PipelineMonitorTensorCompare(io.ComfyNode):
    @classmethod
    def define_schema(cls) -> io.Schema:
        choices = dump_choices()  # recomputed whenever ComfyUI asks for the schema (object_info)
        return io.Schema(
            node_id=TENSOR_COMPARE_STAGE.node,
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
        return compare_inputs_problem(dump_a, dump_b, dump_paths.dumps_dir()) or True

    @classmethod
    def fingerprint_inputs(cls, dump_a=None, dump_b=None, rtol=None, atol=None, **kwargs):
        # No outputs, so re-running never re-runs anything else; re-run when a dump file changed.
        directory = dump_paths.dumps_dir()
        return f"{file_state(directory, str(dump_a))}|{file_state(directory, str(dump_b))}|{rtol}|{atol}"

    @classmethod
    def execute(
        cls, dump_a, dump_b=LIVE_VALUE, rtol=1e-5, atol=1e-8, conditioning=None, latent=None, image=None
    ) -> io.NodeOutput:
        node_id, _ = hidden_inputs(cls)
        values = {"conditioning": conditioning, "latent": latent, "image": image}
        tickets = []

        def build():
            step, ticket = start_compare_step(
                node_id,
                dump_a,
                dump_b,
                float(rtol),
                float(atol),
                values,
                directory=dump_paths.dumps_dir(),
                writer=DUMP_WRITER,
            )
            tickets.append(ticket)
            return step

        step, ui = run_monitor(TENSOR_COMPARE_STAGE.kind, node_id, build, pending_note=COMPARE_PENDING_NOTE)
        if tickets and tickets[0] is not None:  # compared on the writer thread: the step follows
            finished = follow_compare(tickets[0], step, step_text_context(get_runtime().recorder))
            if finished is not None:  # already compared: the node returns the verdict itself
                ui = {"text": [step_text(finished)]}
        return io.NodeOutput(ui=ui)


COMPARE_PENDING_NOTE = "comparing on the dump writer's thread: this text updates with the verdict"


def follow_compare(ticket, pending, context: dict):
    """Put the finished comparison in place of the pending step when the writer has made it, and
    send its text to the client that queued the prompt; the finished step when that happened
    already, before the node returned (its text then goes back with the node)."""
    node_thread = threading.get_ident()
    done_now = []

    def finish(outcome) -> None:
        step = finish_compare_step(pending, outcome)
        if not get_runtime().recorder.replace_step(pending, step):
            log.info("pipeline monitor: comparison of node %s finished after its run ended", step.node_id)
        if threading.get_ident() == node_thread:
            done_now.append(step)
        else:
            send_step_text(context, step)

    ticket.on_done(finish)
    return done_now[0] if done_now else None
