"""Static lookup of dotted names in a ComfyUI source tree: parsed, never imported, so it runs on any
machine with the snapshot and without ComfyUI's requirements.

`Snapshot(root).resolves("comfy.model_management.get_free_memory")` follows what Python would: the
longest prefix that is a module or package of the tree, then each name as a module-level
definition, assignment, import or re-export (star imports included), a submodule, or a class member
(its body, its bases in the tree, and `Class.name = ...` assignments anywhere in the module). The
walk stops, found, at the first plain value (a function or an assigned object: what it holds at
run time is not known statically) or at a name imported from outside the tree.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

_VALUE = ("value",)
# Bases outside the tree that give a class no public members of their own.
MEMBERLESS_BASES = frozenset({"object", "ABC", "Generic", "Protocol"})


class Snapshot:
    def __init__(self, root: Path):
        self.root = Path(root)

    def module_path(self, dotted: str) -> Path | None:
        base = self.root.joinpath(*dotted.split("."))
        for path in (base.with_suffix(".py"), base / "__init__.py"):
            if path.is_file():
                return path
        return base if base.is_dir() else None  # a namespace package

    @functools.cache  # noqa: B019 (a snapshot lives for one test session)
    def _parsed(self, dotted: str):
        """(names, star-imported modules, class attributes set from outside: class name -> names)."""
        path = self.module_path(dotted)
        if path is None or path.is_dir():
            return {}, [], {}
        tree = ast.parse(path.read_text(encoding="utf-8"))
        package = dotted if path.name == "__init__.py" else dotted.rpartition(".")[0]
        names: dict[str, tuple] = {}
        stars: list[str] = []
        _collect(tree.body, names, stars, package)
        outside: dict[str, set[str]] = {}
        for node in ast.walk(tree):
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
                        outside.setdefault(target.value.id, set()).add(target.attr)
        return names, stars, outside

    def resolves(self, symbol: str) -> bool:
        parts = symbol.split(".")
        for end in range(len(parts), 0, -1):
            if self.module_path(".".join(parts[:end])) is not None:
                break
        else:
            return False
        current: tuple = ("module", ".".join(parts[:end]))
        for part in parts[end:]:
            current = self.member(current, part)
            if current is None:
                return False
            if current == _VALUE:
                return True
        return True

    def member(self, owner: tuple, name: str, seen: frozenset = frozenset()):
        if owner[0] == "module":
            return self._module_member(owner[1], name, seen)
        if owner[0] == "class":
            return self._class_member(owner[1], owner[2], name, seen)
        return _VALUE

    def _module_member(self, module: str, name: str, seen: frozenset):
        if (module, name) in seen:
            return None
        seen = seen | {(module, name)}
        names, stars, _ = self._parsed(module)
        entry = names.get(name)
        if entry is not None:
            return self._follow(entry, module, seen)
        if self.module_path(f"{module}.{name}") is not None:
            return ("module", f"{module}.{name}")
        for star in stars:
            found = self._module_member(star, name, seen) if self.module_path(star) else None
            if found is not None:
                return found
        return None

    def _follow(self, entry: tuple, module: str, seen: frozenset):
        if entry[0] == "class":
            return ("class", entry[1], module)
        if entry[0] == "import":
            return ("module", entry[1]) if self.module_path(entry[1]) else _VALUE
        if entry[0] == "from":
            source, name = entry[1], entry[2]
            if self.module_path(f"{source}.{name}") is not None:
                return ("module", f"{source}.{name}")
            if self.module_path(source) is None:
                return _VALUE  # imported from outside the tree
            return self._module_member(source, name, seen)
        return _VALUE

    def _class_member(self, node: ast.ClassDef, module: str, name: str, seen: frozenset):
        body: dict[str, tuple] = {}
        _collect(node.body, body, [], module)
        if name in body:
            return self._follow(body[name], module, seen)
        if name in self._parsed(module)[2].get(node.name, ()):
            return _VALUE
        for base in node.bases:
            if isinstance(base, ast.Name) and base.id in MEMBERLESS_BASES:
                continue
            resolved = self._expression(base, module, seen)
            if resolved is None:
                continue
            if resolved[0] != "class":
                return _VALUE  # a base from outside the tree (str, Enum, ABC...): not knowable
            found = self._class_member(resolved[1], resolved[2], name, seen)
            if found is not None:
                return found
        return None

    def _expression(self, node: ast.AST, module: str, seen: frozenset):
        if isinstance(node, ast.Name):
            found = self._module_member(module, node.id, seen)
            return _VALUE if found is None else found  # a builtin (str, object)
        if isinstance(node, ast.Attribute):
            owner = self._expression(node.value, module, seen)
            return None if owner is None or owner == _VALUE else self.member(owner, node.attr, seen)
        return None


def _collect(statements, names: dict, stars: list, package: str) -> None:
    """Names bound by a block's statements, into the blocks of if / try / with."""
    for node in statements:
        if isinstance(node, ast.ClassDef):
            names[node.name] = ("class", node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = _VALUE
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for leaf in ast.walk(target):
                    if isinstance(leaf, ast.Name):
                        names[leaf.id] = _VALUE
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = ("import", alias.name)
                else:
                    top = alias.name.split(".")[0]
                    names[top] = ("import", top)
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(node, package)
            for alias in node.names:
                if alias.name == "*":
                    stars.append(source)
                else:
                    names[alias.asname or alias.name] = ("from", source, alias.name)
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            for block in ("body", "orelse", "finalbody"):
                _collect(getattr(node, block, []), names, stars, package)
            for handler in getattr(node, "handlers", []):
                _collect(handler.body, names, stars, package)


def _absolute(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    parts = package.split(".") if package else []
    base = parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
    return ".".join([*base, node.module] if node.module else base)
