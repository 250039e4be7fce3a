"""The ComfyUI symbols the pack uses, and a start-up check that each is there.

The list is read from the pack's own adapter code (this folder and the pack's __init__.py), so it
cannot drift from what the code does: every import of a ComfyUI module and every attribute read
through one, `getattr(module, "name")` included (e.g. `comfy.model_management.get_free_memory`,
`execution.PromptExecutor.execute_async`). The check resolves each in the running ComfyUI; what is
missing is named in one warning, and every run report states it (`missing_seams`). The same list
is checked against the ComfyUI snapshots the pack is tested with, without importing them
(tests/unit/test_comfyui_symbols.py).
"""

from __future__ import annotations

import ast
import importlib
import logging
import os
import sys
from collections.abc import Iterable

log = logging.getLogger(__name__)

HERE = os.path.dirname(os.path.abspath(__file__))
PACK_ROOT = os.path.dirname(HERE)
# ComfyUI's top-level modules and packages (its root folder): an absolute import of one of these
# from the pack is a seam. The unit test checks each used one exists in every snapshot.
COMFYUI_MODULES = frozenset(
    {
        "app",
        "comfy",
        "comfy_api",
        "comfy_config",
        "comfy_execution",
        "comfy_extras",
        "execution",
        "folder_paths",
        "latent_preview",
        "node_helpers",
        "nodes",
        "server",
        "utils",
    }
)

_missing: tuple[str, ...] = ()
_checked = False


def adapter_files() -> list[str]:
    """The pack's files that may talk to ComfyUI: nodes/*.py and the pack's __init__.py."""
    names = sorted(n for n in os.listdir(HERE) if n.endswith(".py"))
    return [os.path.join(PACK_ROOT, "__init__.py"), *(os.path.join(HERE, n) for n in names)]


def _aliases(tree: ast.AST, symbols: set[str]) -> dict[str, str]:
    """local name -> the ComfyUI module or symbol an import bound to it (absolute imports only)."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in COMFYUI_MODULES:
                    symbols.add(alias.name)
                    local = alias.asname or alias.name.split(".")[0]
                    aliases[local] = alias.name if alias.asname else local
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in COMFYUI_MODULES:
                for alias in node.names:
                    symbols.add(f"{node.module}.{alias.name}")
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def _dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """The ComfyUI symbol an expression reads: `alias.a.b` or `getattr(alias, "a")`, else None."""
    if isinstance(node, ast.Name):
        return aliases.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, aliases)
        return None if base is None else f"{base}.{node.attr}"
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "getattr"
        and len(node.args) >= 2
        and isinstance(node.args[1], ast.Constant)
        and isinstance(node.args[1].value, str)
    ):
        base = _dotted(node.args[0], aliases)
        return None if base is None else f"{base}.{node.args[1].value}"
    return None


def symbols_in_source(source: str) -> set[str]:
    """Every ComfyUI module and symbol one file imports or reads through a module."""
    tree = ast.parse(source)
    symbols: set[str] = set()
    aliases = _aliases(tree, symbols)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Attribute, ast.Call)):
            dotted = _dotted(node, aliases)
            if dotted is not None:
                symbols.add(dotted)
    return symbols


def used_symbols(files: Iterable[str] | None = None) -> dict[str, list[str]]:
    """symbol -> the pack's files (relative to its root) that use it."""
    used: dict[str, list[str]] = {}
    for path in adapter_files() if files is None else files:
        with open(path, encoding="utf-8") as handle:
            for symbol in symbols_in_source(handle.read()):
                used.setdefault(symbol, []).append(os.path.relpath(path, PACK_ROOT).replace(os.sep, "/"))
    return dict(sorted(used.items()))


def resolves(symbol: str) -> bool:
    """Whether `symbol` is there in the running ComfyUI: its top-level module already imported (by
    ComfyUI, before it loads extensions; never imported here, where the pack's own `nodes` folder
    could be found first), then each attribute read, a submodule imported where the attribute is
    not set yet."""
    parts = symbol.split(".")
    obj = sys.modules.get(parts[0])
    if obj is None:
        return False
    try:
        for index, part in enumerate(parts[1:], start=1):
            try:
                obj = getattr(obj, part)
            except AttributeError:
                obj = importlib.import_module(".".join(parts[: index + 1]))
    except Exception:
        return False
    return True


def self_check(symbols: Iterable[str] | None = None) -> tuple[str, ...]:
    """Resolve every seam; log one warning naming what is missing; remember it for reports."""
    global _missing, _checked
    used = used_symbols() if symbols is None else {s: [] for s in symbols}
    _missing = tuple(s for s in used if not resolves(s))
    _checked = True
    if _missing:
        log.warning(
            "pipeline monitor: this ComfyUI lacks %d of the %d symbols the pack uses: %s "
            "(the monitors using them report less or fail; every run report lists them)",
            len(_missing),
            len(used),
            ", ".join(_missing),
        )
    return _missing


def check_once() -> tuple[str, ...]:
    """self_check() the first time (ComfyUI loads the extension once), the same answer after."""
    return _missing if _checked else self_check()


def missing_seams() -> tuple[str, ...]:
    """What the last self_check found missing (empty before any check)."""
    return _missing
