"""The house keeps its budget: no cycle between the rooms of monitors/, no cycle between the files of
one folder (monitors/, nodes/, bench/, scripts/), no arrow pointing up, at most
9 modules at the root of monitors/, no hand-written product file over 400 lines and no Python
function over 80 lines.

Today's offenders are named below; the lists may only shrink. A file or function that is back
within budget fails the test until its entry is removed, so the lists stay honest.
docs/architecture.md describes the rooms and their floors (scripts/import_graph.py declares them).
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 80
# report, summary_fields, detail_fields, node_fields, stage (the terms every room declares in),
# lazy, background, __init__ and __main__
MAX_ROOT_MODULES = 9
PRODUCT_FOLDERS = ("monitors", "nodes", "web")
PRODUCT_SUFFIXES = (".py", ".mjs", ".js")

# Files over MAX_FILE_LINES today, being split by what each part does (issue 27).
ALLOWED_LONG_FILES: set[str] = set()

# Python functions over MAX_FUNCTION_LINES today ("path:qualified name").
ALLOWED_LONG_FUNCTIONS: set[str] = set()

# Cycles between the files of one folder today, each being removed by another part of issue 39.
KNOWN_FILE_CYCLES: list[list[str]] = []  # none: a cycle between the files of a folder fails the budget


def _import_graph_module():
    spec = importlib.util.spec_from_file_location("import_graph", REPO / "scripts" / "import_graph.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("import_graph", module)  # dataclasses resolve annotations through it
    spec.loader.exec_module(module)
    return sys.modules["import_graph"]


def _product_files() -> list[Path]:
    files = []
    for folder in PRODUCT_FOLDERS:
        for path in (REPO / folder).rglob("*"):
            if path.suffix in PRODUCT_SUFFIXES and ".generated." not in path.name and path.is_file():
                files.append(path)
    return sorted(files)


def _line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def _function_lengths(path: Path) -> dict[str, int]:
    """qualified name -> lines from `def` to its last line, for every function and method."""
    lengths: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = prefix + child.name
                if not isinstance(child, ast.ClassDef):
                    lengths[name] = child.end_lineno - child.lineno + 1
                visit(child, name + ".")

    visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)), "")
    return lengths


def _relative(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def test_no_cycle_between_rooms_and_no_arrow_pointing_up():
    graph_module = _import_graph_module()
    graph = graph_module.build_graph(REPO / "monitors")
    assert graph.cycles == [], f"cycles between rooms of monitors/: {graph.cycles}"
    assert graph.arrows_up == [], f"arrows to a higher floor (scripts/import_graph.py ROOM_LAYERS): {graph.arrows_up}"
    assert graph.unlayered_rooms == [], (
        f"rooms without a floor: {graph.unlayered_rooms} (add them to ROOM_LAYERS and docs/architecture.md)"
    )
    assert set(graph_module.ROOM_LAYERS) <= set(graph.rooms), "ROOM_LAYERS names a room that is gone"


def test_the_graph_counts_imports_inside_functions_and_finds_cycles(tmp_path):
    graph_module = _import_graph_module()
    package = tmp_path / "monitors"
    (package / "room").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "room" / "__init__.py").write_text("")
    (package / "room" / "inner.py").write_text("def late():\n    from ..top import x\n")
    (package / "top.py").write_text("from .room import inner\n")
    graph = graph_module.build_graph(package, layers={"room": 0, "top": 1})
    assert graph.arrows == {"room": {"top"}, "top": {"room"}}
    assert graph.cycles == [["room", "top"]]
    assert graph.arrows_up == [("room", "top")]


def test_no_cycle_between_the_files_of_a_folder_but_the_named_ones():
    graph_module = _import_graph_module()
    cycles = graph_module.all_file_cycles(REPO)  # monitors/, nodes/, bench/, scripts/
    assert [c for c in cycles if c not in KNOWN_FILE_CYCLES] == [], "cycles between the files of a folder"
    gone = [c for c in KNOWN_FILE_CYCLES if c not in cycles]
    assert gone == [], f"no longer a cycle: remove from KNOWN_FILE_CYCLES: {gone}"


def test_file_cycles_count_imports_inside_functions_and_stay_inside_a_folder(tmp_path):
    graph_module = _import_graph_module()
    package = tmp_path / "monitors"
    (package / "room").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "room" / "__init__.py").write_text("from . import a\n")
    (package / "room" / "a.py").write_text("from .b import x\n")
    (package / "room" / "b.py").write_text("def late():\n    from .a import y\n")
    (package / "room" / "c.py").write_text("from ..top import z\n")
    (package / "top.py").write_text("from .room import c\n")
    assert graph_module.file_cycles(package) == [["monitors/room/a.py", "monitors/room/b.py"]]
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "one.py").write_text("import two\n")
    (scripts / "two.py").write_text("def late():\n    from one import f\n")
    assert graph_module.file_cycles(scripts) == [["scripts/one.py", "scripts/two.py"]]


def test_at_most_nine_modules_at_the_root_of_monitors():
    root_modules = sorted(path.name for path in (REPO / "monitors").glob("*.py"))
    assert len(root_modules) <= MAX_ROOT_MODULES, root_modules


def test_no_product_file_over_400_lines_but_the_named_ones():
    lengths = {_relative(path): _line_count(path) for path in _product_files()}
    over = {name for name, n_lines in lengths.items() if n_lines > MAX_FILE_LINES}
    assert over - ALLOWED_LONG_FILES == set(), {name: lengths[name] for name in over - ALLOWED_LONG_FILES}
    back_within = ALLOWED_LONG_FILES - over
    assert back_within == set(), f"within budget now (or gone): remove from ALLOWED_LONG_FILES: {back_within}"


def test_no_python_function_over_80_lines_but_the_named_ones():
    lengths = {
        f"{_relative(path)}:{name}": n_lines
        for path in _product_files()
        if path.suffix == ".py"
        for name, n_lines in _function_lengths(path).items()
    }
    over = {name for name, n_lines in lengths.items() if n_lines > MAX_FUNCTION_LINES}
    assert over - ALLOWED_LONG_FUNCTIONS == set(), {name: lengths[name] for name in over - ALLOWED_LONG_FUNCTIONS}
    back_within = ALLOWED_LONG_FUNCTIONS - over
    assert back_within == set(), f"within budget now (or gone): remove from ALLOWED_LONG_FUNCTIONS: {back_within}"
