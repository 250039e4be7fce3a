"""What monitor nodes read of the running prompt: the rows of the nodes that ran before them, and
the memory picture over the upstream nodes their step describes. A mixin of RunRecorder (beside
step_updates.py and residency_recording.py), kept apart so the recorder's file stays the run's
record itself."""

from __future__ import annotations

from collections.abc import Mapping

from ..node_fields import NodeProfile
from .prompt_info import upstream_node_ids
from .upstream_memory import NO_RUN_REASON, PROFILE_OFF_REASON, unknown, upstream_memory


class RunReads:
    """Needs the recorder's `_lock`, `_run`, `profile_enabled` and `active_prompt_id`."""

    def node_profile(self, node_id: str) -> NodeProfile | None:
        """The profile of a node that already finished in the active run."""
        with self._lock:
            run = self._run
            if run is None:
                return None
            for profile in reversed(run.nodes):
                if profile.node_id == str(node_id):
                    return profile
        return None

    def profile_row(self, node_id: str) -> dict:
        """The profile row (time, peaks, cached) of a node that ran before the caller in this run."""
        profile = self.node_profile(node_id)
        if profile is not None:
            return profile.to_dict()
        # An upstream node has produced its output before the caller runs; if the profile did not
        # see it run, ComfyUI served it from its cache.
        cached = True if self.profile_enabled and self.active_prompt_id is not None else None
        return {"node_id": str(node_id), "duration_s": None, "peak_rss_bytes": None, "cached": cached}

    def upstream_profiles(self, node_id: str | None, prompt: Mapping | None, input_names) -> dict[str, dict]:
        """input name -> profile row, with its class, of the node that produced that input."""
        rows = {}
        for name, source_id in upstream_node_ids(node_id, prompt, input_names).items():
            source = prompt.get(source_id)
            class_type = source.get("class_type") if isinstance(source, Mapping) else None
            rows[name] = {"node_id": source_id, "class_type": class_type, **self.profile_row(source_id)}
        return rows

    def upstream_memory(self, node_id: str | None) -> dict:
        """{memory, memory_unknown_reason, memory_scope} of the monitor `node_id` in the active run:
        the picture over the upstream nodes its step describes (monitors/engine/upstream_memory.py)."""
        with self._lock:
            run = self._run
            if run is None:
                return unknown(NO_RUN_REASON)
            if not run.profile_enabled:
                return unknown(PROFILE_OFF_REASON)
            upstream = run.upstream_plan.get(str(node_id), ())
            results = {n: run.full_results[n] for n in upstream if n in run.full_results}
        return upstream_memory(upstream, results)
