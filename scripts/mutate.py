"""Mutation testing of the numeric core: would the tests notice if the numbers broke?

    .venv/bin/python scripts/mutate.py monitors/latent/analysis.py [MODULE ...] [--tests T ...]

For each module, one mutation at a time, the module's tests run (`pytest -x -q -p no:cacheprovider`) with a
per-mutant timeout; a mutant is killed when they fail. It prints a score per module and every
survivor (file:line and the mutation) so that each can be judged equivalent or not.

Two operators (`--operators`, both by default):
- classic: arithmetic operator swap, comparison boundary swap and negation, constant change
  0<->1 / n -> n+1 / True<->False, `and`<->`or`, `return x` -> `return None`, `+=`<->`-=` and
  `*=`<->`/=`;
- swap: the names people confuse, as a word of a name, attribute, keyword or string
  (allocated<->reserved, min<->max, minimum<->maximum, median<->mean: `memory_allocated` ->
  `memory_reserved`, `"peak_allocated_bytes"` -> `"peak_reserved_bytes"`, `max(...)` -> `min(...)`),
  and two neighbouring positional arguments of a call given the other way round (`f(a, b)` ->
  `f(b, a)`). A name swapped into one the module never binds is not made (a NameError tells
  nothing), nor a swap of two equal arguments or of `isinstance`/`getattr`-like arguments.

Without `--tests`, a module's tests are the tests/unit/test_*.py files that import it. Mutants
are written into a temporary copy of the repository (tracked and untracked, not ignored, files),
never into the working tree, which others may be testing at the same time. One baseline run under
coverage (per-test contexts) first checks that the tests pass, then each mutant runs only the
tests that executed its lines; a mutant on a line no test executes survives without a run
(reported as "not covered"). Mutations inside logging calls and annotations are not made: they
cannot change a number.

Speed: heavy imports (torch, ...) are made once and each run is a fork of this process, so a
mutant costs the tests' own time, not torch's import (`--no-fork` runs a fresh interpreter per
mutant instead). `--jobs` defaults to 1: the tests of one mutant already keep a core busy.

A tool to run, not a CI gate. Exit status: 0 when every baseline passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import dataclasses
import importlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

log = logging.getLogger("mutate")

REPO = Path(__file__).resolve().parents[1]
PYTEST_ARGS = ["-x", "-q", "-p", "no:cacheprovider"]
PYTEST_PLUGINS = (
    "pytest,pytest_asyncio.plugin,pytest_aiohttp.plugin,anyio.pytest_plugin,_hypothesis_pytestplugin"
)
DEFAULT_PREIMPORT = f"torch,numpy,safetensors,psutil,yaml,jsonschema,{PYTEST_PLUGINS}"
# Names of loggers whose calls are never mutated: a constant in a log message changes no number.
LOGGER_NAMES = {"log", "logger", "logging", "_log", "_logger", "LOGGER", "LOG"}
COPY_IGNORE = shutil.ignore_patterns(
    ".git", ".venv*", "node_modules", "__pycache__", ".pytest_cache", ".hypothesis"
)

# -- mutation points ---------------------------------------------------------------------------

_ARITH = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Mult,
    ast.Mod: ast.FloorDiv,
    ast.Pow: ast.Mult,
}
_AUG = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult}
_CMP_SWAP = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
_CMP_NEGATE = {ast.Lt: ast.GtE, ast.LtE: ast.Gt, ast.Gt: ast.LtE, ast.GtE: ast.Lt}
_SYMBOL = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Is: "is",
    ast.IsNot: "is not",
    ast.In: "in",
    ast.NotIn: "not in",
    ast.And: "and",
    ast.Or: "or",
}


@dataclasses.dataclass(frozen=True)
class Mutant:
    index: int  # position of the mutation point in walk order, with `variant`: how to find it again
    variant: int
    kind: str
    line: int
    end_line: int
    description: str
    # The first line of the statement holding the mutation: coverage records a statement on its
    # first line only, so a constant inside a literal spread over lines is "run" there.
    statement_line: int = 0


def _walk(node: ast.AST, skip: bool = False):
    """Every node with whether it lies where a mutation could change no number (annotations,
    docstrings, logging calls), in a fixed order so that a fresh parse finds the same point."""
    yield node, skip
    for field, value in ast.iter_fields(node):
        children = value if isinstance(value, list) else [value]
        for child in children:
            if not isinstance(child, ast.AST):
                continue
            child_skip = skip or field in ("annotation", "returns", "type_comment")
            if (
                isinstance(child, ast.Expr)
                and isinstance(child.value, ast.Constant)
                and isinstance(child.value.value, str)
            ):
                child_skip = True  # docstring or bare string
            if isinstance(child, ast.Call) and _is_logging_call(child):
                child_skip = True
            yield from _walk(child, child_skip)


def _is_logging_call(call: ast.Call) -> bool:
    func = call.func
    return (
        isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in LOGGER_NAMES
    )


def _changed_constant(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return 1 if value == 0 else 0 if value == 1 else value + 1
    if isinstance(value, float):
        return 1.0 if value == 0.0 else 0.0 if value == 1.0 else value + 1.0
    return None


# The swap operator: names people confuse (a word of an identifier, attribute or string, split on
# `_`) and two positional arguments given in the wrong order.
_SWAP_WORDS = {
    "allocated": "reserved",
    "reserved": "allocated",
    "min": "max",
    "max": "min",
    "minimum": "maximum",
    "maximum": "minimum",
    "median": "mean",
    "mean": "median",
}
_SWAP_WORD = re.compile(r"(?<![A-Za-z0-9])(" + "|".join(_SWAP_WORDS) + r")(?![A-Za-z0-9])")
OPERATORS = ("classic", "swap")
# Calls whose two arguments cannot be given the other way round without a TypeError at once.
_NO_ARGUMENT_SWAP = {"isinstance", "issubclass", "hasattr", "getattr", "setattr"}


def _swapped(text: str) -> str | None:
    """`text` with every swappable word swapped (`memory_allocated` -> `memory_reserved`,
    `max(` -> `min(`), or None when it has none. Words are delimited by anything but letters and
    digits, so `_` separates them and `maximal` or `meaning` are left alone."""
    new = _SWAP_WORD.sub(lambda m: _SWAP_WORDS[m.group(1)], text)
    return None if new == text else new


def _defined_names(tree: ast.AST) -> set[str]:
    """Names a swapped name may become: those the module binds, and the builtins (a name that
    exists nowhere is a NameError at once, which tells nothing)."""
    names = set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
    return names


def _swap_variants(node: ast.AST, defined: set[str]) -> list[tuple[str, callable]]:
    out = []
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
        new = _swapped(node.id)
        if new in defined:
            out.append((f"swap name `{node.id}` -> `{new}`", lambda n, new=new: setattr(n, "id", new)))
    elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
        new = _swapped(node.attr)
        if new:
            out.append((f"swap attribute `.{node.attr}` -> `.{new}`", lambda n, new=new: setattr(n, "attr", new)))
    elif isinstance(node, ast.Constant) and isinstance(node.value, str):
        new = _swapped(node.value)
        if new:
            out.append((f"swap string {node.value!r} -> {new!r}", lambda n, new=new: setattr(n, "value", new)))
    elif isinstance(node, ast.Call):
        out += _call_swaps(node)
    return out


def _call_swaps(call: ast.Call) -> list[tuple[str, callable]]:
    """A keyword renamed (`min=` -> `max=`) where the call has no keyword of the new name (a
    duplicate keyword does not compile), and two neighbouring positional arguments swapped."""
    out = []
    names = {k.arg for k in call.keywords}
    for position, keyword in enumerate(call.keywords):
        new = _swapped(keyword.arg) if keyword.arg else None
        if new and new not in names:

            def rename(n, position=position, new=new):
                n.keywords[position].arg = new

            out.append((f"swap keyword `{keyword.arg}=` -> `{new}=` (line {keyword.lineno})", rename))
    if isinstance(call.func, ast.Name) and call.func.id in _NO_ARGUMENT_SWAP:
        return out
    args = call.args
    for i in range(len(args) - 1):
        a, b = args[i], args[i + 1]
        if isinstance(a, ast.Starred) or isinstance(b, ast.Starred) or ast.dump(a) == ast.dump(b):
            continue  # the same expression twice: swapping them changes nothing

        def apply(n, i=i):
            n.args[i], n.args[i + 1] = n.args[i + 1], n.args[i]

        out.append((f"swap arguments {i + 1} and {i + 2}", apply))
    return out


def _variants(node: ast.AST, operators=OPERATORS, defined=frozenset()) -> list[tuple[str, callable]]:
    """(description, apply) for each mutation of this node; apply changes a node in place."""
    out = _classic_variants(node) if "classic" in operators else []
    if "swap" in operators:
        out += _swap_variants(node, defined)
    return out


def _classic_variants(node: ast.AST) -> list[tuple[str, callable]]:
    out = []
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITH:
        new = _ARITH[type(node.op)]
        out.append(
            (f"`{_SYMBOL[type(node.op)]}` -> `{_SYMBOL[new]}`", lambda n, new=new: setattr(n, "op", new()))
        )
    elif isinstance(node, ast.AugAssign) and type(node.op) in _AUG:
        new = _AUG[type(node.op)]
        out.append(
            (f"`{_SYMBOL[type(node.op)]}=` -> `{_SYMBOL[new]}=`", lambda n, new=new: setattr(n, "op", new()))
        )
    elif isinstance(node, ast.BoolOp):
        new = ast.Or if isinstance(node.op, ast.And) else ast.And
        out.append(
            (f"`{_SYMBOL[type(node.op)]}` -> `{_SYMBOL[new]}`", lambda n, new=new: setattr(n, "op", new()))
        )
    elif isinstance(node, ast.Compare):
        for position, op in enumerate(node.ops):
            for table in (_CMP_SWAP, _CMP_NEGATE):
                new = table.get(type(op))
                if new is None:
                    continue

                def apply(n, position=position, new=new):
                    n.ops[position] = new()

                out.append((f"`{_SYMBOL[type(op)]}` -> `{_SYMBOL[new]}`", apply))
    elif isinstance(node, ast.Constant):
        new_value = _changed_constant(node.value)
        if new_value is not None:
            out.append(
                (f"`{node.value!r}` -> `{new_value!r}`", lambda n, v=new_value: setattr(n, "value", v))
            )
    elif isinstance(node, ast.Return) and node.value is not None:
        if not (isinstance(node.value, ast.Constant) and node.value.value is None):
            out.append(("`return ...` -> `return None`", lambda n: setattr(n, "value", ast.Constant(None))))
    return out


def _points(tree: ast.Module, operators=OPERATORS):
    index = 0
    defined = _defined_names(tree)
    for node, skip in _walk(tree):
        variants = _variants(node, operators, defined)
        if not variants:
            continue
        if not skip:
            yield index, node, variants
        index += 1


def _statement_lines(tree: ast.AST) -> dict[int, int]:
    """id(node) -> the first line of the innermost statement holding it."""
    first = {}
    for statement in ast.walk(tree):  # breadth first: inner statements come later and win
        if isinstance(statement, ast.stmt):
            for node in ast.walk(statement):
                first[id(node)] = statement.lineno
    return first


def mutants_of(source: str, operators=OPERATORS) -> list[Mutant]:
    tree = ast.parse(source)
    lines = source.splitlines()
    statement_of = _statement_lines(tree)
    out = []
    for index, node, variants in _points(tree, operators):
        snippet = _snippet(lines[node.lineno - 1].strip())
        for variant, (description, _) in enumerate(variants):
            kind = type(node).__name__.lower()
            if description.startswith("swap "):
                kind = "swap"
            out.append(
                Mutant(
                    index,
                    variant,
                    kind,
                    node.lineno,
                    getattr(node, "end_lineno", None) or node.lineno,
                    f"{description} in `{snippet}`",
                    min(statement_of.get(id(node), node.lineno), node.lineno),
                )
            )
    return out


def mutated_source(source: str, mutant: Mutant, operators=OPERATORS) -> str:
    tree = ast.parse(source)
    for index, node, variants in _points(tree, operators):
        if index == mutant.index:
            variants[mutant.variant][1](node)
            return ast.unparse(ast.fix_missing_locations(tree))
    raise LookupError(f"no mutation point {mutant.index}")


def _snippet(text: str, limit: int = 90) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- running the tests -------------------------------------------------------------------------


def _child_main(
    work: str, pytest_args: list[str], log_path: str, coverage_of: str | None, coverage_out: str | None
) -> int:
    """Runs in the forked (or fresh) child: pytest in the copy, optionally under coverage."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.chdir(work)
    sys.path.insert(0, work)
    sys.dont_write_bytecode = (
        True  # a mutant of the same size written in the same second must not reuse a stale .pyc
    )
    import pytest

    if not coverage_of:
        return int(pytest.main(pytest_args))
    import coverage

    cov = coverage.Coverage(data_file=None, include=[coverage_of], config_file=False)

    class SwitchContext:
        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_protocol(self, item, nextitem):
            cov.switch_context(item.nodeid)
            yield
            cov.switch_context("")

    cov.start()
    try:
        rc = int(pytest.main(pytest_args, plugins=[SwitchContext()]))
    finally:
        cov.stop()
    data = cov.get_data()
    by_line = data.contexts_by_lineno(coverage_of) if coverage_of in data.measured_files() else {}
    Path(coverage_out).write_text(json.dumps({str(line): sorted(c) for line, c in by_line.items()}))
    return rc


class Runner:
    """Starts one pytest run in a copy and says when it has finished (fork or fresh interpreter)."""

    def __init__(self, fork: bool):
        self.fork = fork and hasattr(os, "fork")

    def start(self, work: Path, pytest_args: list[str], log_path: Path, coverage_of=None, coverage_out=None):
        if self.fork:
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                rc = 3
                try:
                    os.setsid()  # own process group: a timeout ends whatever the tests started too
                    rc = _child_main(str(work), pytest_args, str(log_path), coverage_of, coverage_out)
                finally:
                    os._exit(rc)
            return pid
        payload = json.dumps([str(work), pytest_args, str(log_path), coverage_of, coverage_out])
        return subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--child", payload],
            cwd=work,
            start_new_session=True,
        )

    def poll(self, handle) -> int | None:
        if isinstance(handle, subprocess.Popen):
            return handle.poll()
        pid, status = os.waitpid(handle, os.WNOHANG)
        if pid == 0:
            return None
        return os.waitstatus_to_exitcode(status)

    def kill(self, handle) -> None:
        pid = handle.pid if isinstance(handle, subprocess.Popen) else handle
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if isinstance(handle, subprocess.Popen):
            handle.wait()
        else:
            os.waitpid(pid, 0)

    def run(self, work, pytest_args, log_path, timeout_s=None, **coverage) -> tuple[int | None, float]:
        started = time.monotonic()
        handle = self.start(work, pytest_args, log_path, **coverage)
        while (rc := self.poll(handle)) is None:
            if timeout_s is not None and time.monotonic() - started > timeout_s:
                self.kill(handle)
                return None, time.monotonic() - started
            time.sleep(0.02)
        return rc, time.monotonic() - started


def make_copy(root: Path, into: Path) -> Path:
    """The tracked and untracked (not ignored) files of `root`; all of it outside git."""
    listed = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z", "-co", "--exclude-standard"], capture_output=True
    )
    if listed.returncode != 0:
        shutil.copytree(root, into, ignore=COPY_IGNORE, symlinks=True)
        return into
    into.mkdir(parents=True)
    for name in listed.stdout.decode().split("\0"):
        source = root / name
        if not name or not (source.is_file() or source.is_symlink()):
            continue  # deleted in the working tree, or a submodule
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target, follow_symlinks=False)
    return into


def tests_importing(root: Path, module: str) -> list[str]:
    dotted = module.removesuffix(".py").replace("/", ".")
    package, _, name = dotted.rpartition(".")
    patterns = [
        re.compile(rf"\b{re.escape(dotted)}\b"),
        re.compile(rf"from\s+{re.escape(package)}\s+import\s+[^\n]*\b{re.escape(name)}\b"),
    ]
    if name == "__init__":
        patterns = [re.compile(rf"\b(from|import)\s+{re.escape(package)}\b(?!\.)")]
    found = []
    for path in sorted((root / "tests" / "unit").glob("test_*.py")):
        text = path.read_text(errors="replace")
        if any(p.search(text) for p in patterns):
            found.append(path.relative_to(root).as_posix())
    return found


@dataclasses.dataclass
class Result:
    mutant: Mutant
    outcome: str  # killed, survived, timeout, not covered, error
    seconds: float = 0.0


def mutate_module(
    module: str,
    tests: list[str],
    works: list[Path],
    runner: Runner,
    timeout_s: float | None,
    select_tests: bool,
    log_dir: Path,
    lines: set[int] | None = None,
    operators=OPERATORS,
) -> list[Result] | None:
    original = (works[0] / module).read_text()
    mutants = [m for m in mutants_of(original, operators) if lines is None or m.line in lines]
    cov_out = log_dir / "coverage.json"
    target = str((works[0] / module).resolve())
    rc, baseline_s = runner.run(
        works[0],
        [*PYTEST_ARGS, *tests],
        log_dir / "baseline.log",
        coverage_of=target,
        coverage_out=str(cov_out),
    )
    if rc != 0:
        log.error(
            "%s: the tests fail without any mutation (exit %s); see %s", module, rc, log_dir / "baseline.log"
        )
        return None
    contexts = {int(line): set(c) for line, c in json.loads(cov_out.read_text()).items()}
    # The file is rewritten by ast.unparse for every mutant: that alone must change nothing.
    for work in works:
        (work / module).write_text(ast.unparse(ast.parse(original)))
    rc, _ = runner.run(works[0], [*PYTEST_ARGS, *tests], log_dir / "unparsed.log")
    if rc != 0:
        log.error("%s: the tests fail on the module rewritten by ast.unparse (exit %s)", module, rc)
        return None
    timeout_s = timeout_s or max(30.0, 3.0 * baseline_s)
    log.info(
        "%s: %d mutants, tests %s, baseline %.1f s, timeout %.0f s",
        module,
        len(mutants),
        " ".join(tests),
        baseline_s,
        timeout_s,
    )

    results: list[Result] = []
    pending = []
    for mutant in mutants:
        covering = set().union(
            *(
                contexts.get(line, set())
                for line in range(mutant.statement_line or mutant.line, mutant.end_line + 1)
            )
        )
        if not covering:
            results.append(Result(mutant, "not covered"))
        elif select_tests and "" not in covering:  # "" = executed at import: every test may see it
            pending.append((mutant, sorted(covering)))
        else:
            pending.append((mutant, tests))
    free = list(works)
    running = {}
    done = 0
    try:
        while pending or running:
            while pending and free:
                mutant, selected = pending.pop(0)
                work = free.pop()
                (work / module).write_text(mutated_source(original, mutant, operators))
                log_path = log_dir / f"mutant-{mutant.index}-{mutant.variant}.log"
                handle = runner.start(work, [*PYTEST_ARGS, *selected], log_path)
                running[handle if not isinstance(handle, subprocess.Popen) else handle.pid] = (
                    handle,
                    mutant,
                    work,
                    time.monotonic(),
                    selected,
                )
            time.sleep(0.02)
            for key, (handle, mutant, work, started, selected) in list(running.items()):
                rc = runner.poll(handle)
                elapsed = time.monotonic() - started
                if rc is None and elapsed <= timeout_s:
                    continue
                if rc is None:
                    runner.kill(handle)
                    outcome = "timeout"
                elif rc == 0:
                    outcome = "survived"
                elif (
                    rc in (4, 5) and selected is not tests
                ):  # a test id pytest could not select: run them all
                    pending.insert(0, (mutant, tests))
                    del running[key]
                    free.append(work)
                    continue
                else:
                    # 4 with every test: a conftest that imports the mutant failed (the baseline
                    # proved the command line valid), so no test could even start: killed.
                    outcome = "killed" if rc in (1, 2, 3, 4) or rc < 0 else "error"
                results.append(Result(mutant, outcome, elapsed))
                del running[key]
                free.append(work)
                done += 1
                if done % 10 == 0:
                    log.info(
                        "%s: %d of %d run",
                        module,
                        done,
                        len(mutants) - sum(r.outcome == "not covered" for r in results),
                    )
    finally:
        for handle, *_ in running.values():
            runner.kill(handle)
        for work in works:
            (work / module).write_text(original)
    return sorted(results, key=lambda r: (r.mutant.line, r.mutant.index, r.mutant.variant))


def report(module: str, results: list[Result], out) -> dict:
    counts = {
        name: sum(r.outcome == name for r in results)
        for name in ("killed", "timeout", "survived", "not covered", "error")
    }
    total = len(results)
    score_pct = 100.0 * (counts["killed"] + counts["timeout"]) / total if total else None
    score = "n/a" if score_pct is None else f"{score_pct:.1f} %"
    out.write(
        f"\n{module}: {total} mutants, {counts['killed']} killed, {counts['timeout']} timeout, "
        f"{counts['survived']} survived, {counts['not covered']} not covered, {counts['error']} error "
        f"-> score {score}\n"
    )
    for r in results:
        if r.outcome in ("survived", "not covered", "error"):
            tag = "" if r.outcome == "survived" else f"  ({r.outcome})"
            out.write(f"  {module}:{r.mutant.line}: [{r.mutant.kind}] {r.mutant.description}{tag}\n")
    return {
        "module": module,
        "total": total,
        **{k.replace(" ", "_"): v for k, v in counts.items()},
        "score_pct": score_pct,
        "survivors": [
            dataclasses.asdict(r.mutant) | {"outcome": r.outcome}
            for r in results
            if r.outcome in ("survived", "not covered", "error")
        ],
    }


def _operator_list(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in OPERATORS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"operators are {', '.join(OPERATORS)}, comma-separated")
    return names


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        work, pytest_args, log_path, coverage_of, coverage_out = json.loads(argv[1])
        return _child_main(work, pytest_args, log_path, coverage_of, coverage_out)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="+", help="module files relative to the root, e.g. monitors/engine/span.py")
    parser.add_argument(
        "--tests", nargs="+", help="test files (default: tests/unit/test_*.py importing the module)"
    )
    parser.add_argument("--root", type=Path, default=REPO, help="repository to copy (default: this one)")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument(
        "--timeout", type=float, default=None, help="seconds per mutant (default: 3x baseline, >= 30)"
    )
    parser.add_argument("--all-tests", action="store_true", help="run every test file for every mutant")
    parser.add_argument("--no-fork", action="store_true", help="a fresh interpreter per mutant")
    parser.add_argument("--preimport", default=DEFAULT_PREIMPORT, help="modules imported once before forking")
    parser.add_argument("--list", action="store_true", help="list the mutants, run nothing")
    parser.add_argument(
        "--lines", type=int, nargs="+", help="only the mutants on these lines (re-checking a run's survivors)"
    )
    parser.add_argument("--json", type=Path, help="write the results here too")
    parser.add_argument(
        "--operators",
        type=_operator_list,
        default=OPERATORS,
        help="classic: operators, comparisons, constants, returns; swap: allocated/reserved, "
        "min/max, median/mean in names and strings, two positional arguments; comma-separated "
        "(default: classic,swap)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    # Stopped with SIGTERM, still end the running tests and remove the temporary copy.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    root = args.root.resolve()

    if args.list:
        for module in args.modules:
            for m in mutants_of((root / module).read_text(), args.operators):
                if args.lines and m.line not in args.lines:
                    continue
                sys.stdout.write(f"{module}:{m.line}: [{m.kind}] {m.description}\n")
        return 0

    runner = Runner(fork=not args.no_fork)
    if runner.fork:
        for name in filter(None, args.preimport.split(",")):
            try:
                importlib.import_module(name.strip())
            except Exception as error:  # noqa: BLE001 - an optional speed-up only
                log.info("not preimported: %s (%s)", name, error)
    summary = []
    failed = False
    with tempfile.TemporaryDirectory(prefix="mutate-") as tmp:
        works = [make_copy(root, Path(tmp) / f"work{i}") for i in range(max(1, args.jobs))]
        for module in args.modules:
            tests = args.tests or tests_importing(
                works[0], module
            )  # the copy: files added since are not in it
            if not tests:
                log.error("%s: no tests import it; name them with --tests", module)
                failed = True
                continue
            log_dir = Path(tmp) / ("logs-" + module.replace("/", "_"))
            log_dir.mkdir()
            results = mutate_module(
                module,
                tests,
                works,
                runner,
                args.timeout,
                not args.all_tests,
                log_dir,
                set(args.lines) if args.lines else None,
                args.operators,
            )
            if results is None:
                failed = True
                sys.stderr.write(
                    (log_dir / "baseline.log").read_text()[-4000:]
                    if (log_dir / "baseline.log").exists()
                    else ""
                )
                continue
            summary.append(report(module, results, sys.stdout))
            sys.stdout.flush()
    if summary:
        sys.stdout.write("\nmodule | mutants | killed | timeout | survived | not covered | score\n")
        for row in summary:
            score = "n/a" if row["score_pct"] is None else f"{row['score_pct']:.1f} %"
            sys.stdout.write(
                f"{row['module']} | {row['total']} | {row['killed']} | {row['timeout']} | "
                f"{row['survived']} | {row['not_covered']} | {score}\n"
            )
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
