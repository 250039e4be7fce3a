"""The recorder's side of the model-residency log (monitors/engine/model_residency.py): the calls
the framework adapter (nodes/model_residency.py) makes while a prompt runs. A mixin of RunRecorder,
kept apart so the recorder's file stays one concern."""

from __future__ import annotations

import dataclasses
import time

from .model_residency import ModelEvent


class ResidencyRecording:
    """Needs the recorder's `_lock`, `_run`, `_node_info` and `_residency_history`."""

    def model_event(self, event: ModelEvent) -> None:
        """A load, unload or patch of a model's weights: stamped with the prompt offset and the
        running node, appended to the run's bounded log (outside a prompt: only remembered)."""
        with self._lock:
            run = self._run
            if run is not None:
                running = next(reversed(run.open_nodes), None) if run.open_nodes else None
                node_class = self._node_info(run, running)[0] if running is not None else None
                offset = time.monotonic() - run.started_monotonic_s - (event.duration_s or 0.0)
                event = dataclasses.replace(event, offset_s=offset, node_id=running, node_class=node_class)
            event = self._residency_history.annotate(event, run.prompt_id if run else None)
            if run is not None:
                run.residency.append(event)

    def model_resident(self, model_id, model_class) -> None:
        """A model a node asked for whose weights were loaded already."""
        with self._lock:
            if self._run is not None:
                self._run.residency.note_resident(model_id, model_class)

    def set_resident_at_end(self, models) -> None:
        """The models the model manager holds as the prompt ends (the framework adapter's list)."""
        with self._lock:
            if self._run is not None:
                self._run.resident_at_end = models
