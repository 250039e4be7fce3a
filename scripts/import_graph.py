"""The import graph of monitors/ by room: rooms, arrows, cycles and arrows pointing up.

A room is a folder or a root module of `monitors/`. Every import at any depth is an arrow, also
one inside a function (it breaks a cycle at run time only, not in the reader's head). The same
arrows between the files of one folder give the cycles inside a folder (`file_cycles`), for
monitors/, nodes/, bench/ and scripts/ (FILE_CYCLE_FOLDERS).

    python scripts/import_graph.py            # rooms and arrows, cycles, arrows up, file cycles
    python scripts/import_graph.py --json     # the same as JSON

"Up" is against `ROOM_LAYERS` below, the layering docs/architecture.md describes: an arrow
points up when it goes to a room on a higher floor than its own. The stages' rooms are read from
the stage registration (monitors/vocabulary/stages.py), so a new stage needs no line here. Rooms on the same floor may
import one another as long as no cycle forms.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "monitors"
FILE_CYCLE_FOLDERS = ("monitors", "nodes", "bench", "scripts")

# floor of each room, lowest first; an arrow may point to the same floor or below. The stages'
# rooms (floor 3) are not listed: they are the rooms the stage registration imports (stage_rooms).
FLOORS_BELOW_THE_STAGES: dict[str, int] = {
    # 0: the foundations every room may use
    "report": 0,
    "summary_fields": 0,
    "detail_fields": 0,
    "node_fields": 0,
    "stage": 0,
    "lazy": 0,
    "background": 0,
    # 1: every backend read; the numeric kernels
    "probes": 1,
    "numeric": 1,
    # 2: the run engine
    "engine": 2,
}
# 3: the stages, one step kind each (a stage may use another: lora and conditioning use models)
STAGE_FLOOR = 3
FLOORS_ABOVE_THE_STAGES: dict[str, int] = {
    # 4: the vocabulary (its stage registration imports every stage)
    "vocabulary": 4,
    # 5: the exporters (HTML, trace, Prometheus, CSV)
    "exporters": 5,
    # 6: the front ends inside the library: the profiler of any pipeline, the command line
    "pipeline_profiler": 6,
    "cli": 6,
    "__main__": 7,
}
# the stage registration: `from .. import <room>, ...` names the stages' rooms
STAGES_FILE = Path("vocabulary") / "stages.py"


def stage_rooms(package_dir: Path) -> tuple[str, ...]:
    """The rooms of the registered stages: the rooms `monitors/vocabulary/stages.py` imports
    (`from .. import lora, models, ...`)."""
    tree = ast.parse((package_dir / STAGES_FILE).read_text(encoding="utf-8"))
    return tuple(
        alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.level == 2 and node.module is None
        for alias in node.names
    )


def room_layers(package_dir: Path) -> dict[str, int]:
    """The floor of every room: the ones named above, the stages' rooms on STAGE_FLOOR."""
    stages = dict.fromkeys(stage_rooms(package_dir), STAGE_FLOOR)
    return {**FLOORS_BELOW_THE_STAGES, **stages, **FLOORS_ABOVE_THE_STAGES}


ROOM_LAYERS: dict[str, int] = room_layers(Path(__file__).resolve().parent.parent / PACKAGE)


@dataclass(frozen=True)
class ImportGraph:
    rooms: tuple[str, ...]
    arrows: dict[str, set[str]]
    cycles: list[list[str]]
    arrows_up: list[tuple[str, str]]
    unlayered_rooms: list[str]


def room_of(module: str) -> str | None:
    """`monitors.lora.side` -> `lora`; None for modules outside the package or the package."""
    parts = module.split(".")
    if parts[0] != PACKAGE or len(parts) < 2:
        return None
    return parts[1]


def module_name(package_dir: Path, path: Path) -> str:
    relative = path.relative_to(package_dir.parent).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(tree: ast.AST, module: str, is_package: bool, package_dir: Path) -> set[str]:
    """Every module `module` imports, relative imports resolved; `from X import name` adds
    `X.name` when that is a module of the package (so `from . import vocabulary` is an arrow), and
    `X` itself when a name is not a module (so `from . import session` is no arrow to `__init__`)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                if not is_package:
                    base = base[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names_a_module_only = True
            for alias in node.names:
                candidate = f"{target}.{alias.name}"
                relative = Path(*candidate.split(".")[1:]) if "." in candidate else None
                if relative is not None and (
                    (package_dir / relative).with_suffix(".py").exists() or (package_dir / relative).is_dir()
                ):
                    found.add(candidate)
                else:
                    names_a_module_only = False
            if not names_a_module_only:
                found.add(target)
    return found


def strongly_connected(arrows: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components with more than one room (a cycle between rooms)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(room: str) -> None:
        index[room] = low[room] = len(index)
        stack.append(room)
        on_stack.add(room)
        for target in sorted(arrows.get(room, ())):
            if target not in index:
                visit(target)
                low[room] = min(low[room], low[target])
            elif target in on_stack:
                low[room] = min(low[room], index[target])
        if low[room] == index[room]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == room:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for room in sorted(arrows):
        if room not in index:
            visit(room)
    return sorted(components)


def _file_of(top: Path, module: str) -> Path | None:
    """The file of a dotted module under `top`'s parent (`monitors.lora.caches` -> monitors/lora/caches.py)."""
    base = top.parent.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def file_arrows(top: Path) -> dict[str, set[str]]:
    """Every .py file under the folder `top` -> the files of its own folder it imports, at any depth
    (also inside a function), as paths relative to `top`'s parent. A folder without `__init__.py`
    (scripts/) imports a sibling by its bare name (`import mutate`)."""
    arrows: dict[str, set[str]] = {}
    for path in sorted(top.rglob("*.py")):
        module = module_name(top, path)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        targets = imported_modules(tree, module, path.name == "__init__.py", top)
        if not (path.parent / "__init__.py").exists():
            targets |= {f"{module.rpartition('.')[0]}.{target.partition('.')[0]}" for target in targets}
        siblings = {
            found
            for target in targets
            if (found := _file_of(top, target)) is not None and found.parent == path.parent and found != path
        }
        name = path.relative_to(top.parent).as_posix()
        arrows[name] = {sibling.relative_to(top.parent).as_posix() for sibling in siblings}
    return arrows


def file_cycles(top: Path) -> list[list[str]]:
    """Cycles between the files of one folder, for every folder under `top`."""
    return strongly_connected(file_arrows(top))


def build_graph(package_dir: Path, layers: dict[str, int] | None = None) -> ImportGraph:
    layers = ROOM_LAYERS if layers is None else layers
    arrows: dict[str, set[str]] = {}
    for path in sorted(package_dir.rglob("*.py")):
        module = module_name(package_dir, path)
        source_room = room_of(module)
        if source_room is None or source_room.startswith("__init__"):
            continue
        arrows.setdefault(source_room, set())
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for target in imported_modules(tree, module, path.name == "__init__.py", package_dir):
            target_room = room_of(target)
            if target_room is not None and target_room != source_room:
                arrows[source_room].add(target_room)
    rooms = tuple(sorted(arrows))
    arrows_up = sorted(
        (source, target)
        for source, targets in arrows.items()
        for target in targets
        if source in layers and target in layers and layers[target] > layers[source]
    )
    return ImportGraph(
        rooms=rooms,
        arrows=arrows,
        cycles=strongly_connected(arrows),
        arrows_up=arrows_up,
        unlayered_rooms=[room for room in rooms if room not in layers],
    )


def describe(graph: ImportGraph, layers: dict[str, int]) -> str:
    n_arrows = sum(len(targets) for targets in graph.arrows.values())
    lines = [f"{len(graph.rooms)} rooms, {n_arrows} arrows"]
    for room in sorted(graph.rooms, key=lambda name: (layers.get(name, -1), name)):
        floor = layers.get(room)
        floor_text = "?" if floor is None else str(floor)
        lines.append(f"  [{floor_text}] {room} -> {', '.join(sorted(graph.arrows[room])) or '-'}")
    lines.append(f"cycles: {len(graph.cycles)}")
    lines.extend(f"  {' <-> '.join(cycle)}" for cycle in graph.cycles)
    lines.append(f"arrows pointing up: {len(graph.arrows_up)}")
    lines.extend(f"  {source} -> {target}" for source, target in graph.arrows_up)
    if graph.unlayered_rooms:
        lines.append(f"rooms without a floor: {', '.join(graph.unlayered_rooms)}")
    return "\n".join(lines)


def all_file_cycles(repo: Path) -> list[list[str]]:
    return [cycle for folder in FILE_CYCLE_FOLDERS for cycle in file_cycles(repo / folder)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", type=Path, default=Path(__file__).resolve().parent.parent / PACKAGE)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    graph = build_graph(args.package)
    cycles_in_folders = all_file_cycles(args.package.parent)
    if args.json:
        payload = {
            "rooms": list(graph.rooms),
            "arrows": {room: sorted(targets) for room, targets in graph.arrows.items()},
            "cycles": graph.cycles,
            "arrows_up": graph.arrows_up,
            "unlayered_rooms": graph.unlayered_rooms,
            "file_cycles": cycles_in_folders,
        }
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
    else:
        sys.stdout.write(describe(graph, ROOM_LAYERS) + "\n")
        sys.stdout.write(f"cycles between the files of a folder: {len(cycles_in_folders)}\n")
        sys.stdout.writelines(f"  {' <-> '.join(cycle)}\n" for cycle in cycles_in_folders)
    return 1 if graph.cycles or graph.arrows_up or cycles_in_folders else 0


if __name__ == "__main__":
    sys.exit(main())
