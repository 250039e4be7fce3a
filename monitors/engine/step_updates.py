"""The recorder's side of a step that finishes after its node returned (a tensor dump written on a
background thread, monitors/dumps/writer.py): the step is added at once, saying what is pending,
and replaced by its finished form when the work ends. A mixin of RunRecorder, kept apart so the
recorder's file stays one concern."""

from __future__ import annotations

from ..report import StepReport


class StepUpdates:
    """Needs the recorder's `_lock`, `_run` and `_last_steps`."""

    def replace_step(self, old: StepReport, new: StepReport) -> bool:
        """Put `new` where `old` (the very object add_step took) is, in the active run and among the
        steps shown again for cached nodes; False when `old` is not in the active run (the run
        ended, or another began)."""
        with self._lock:
            run = self._run
            index = next((i for i, step in enumerate(run.steps) if step is old), None) if run else None
            if index is None:
                return False
            run.steps[index] = new
            for key, step in self._last_steps.items():
                if step is old:
                    self._last_steps[key] = new
            return True
