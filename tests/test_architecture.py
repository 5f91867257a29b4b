"""The layering rules, checked by walking imports (AST and a real import), not by grep."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ("api", "core", "workers", "engine", "keel_cli", "bench")
HEAVY = ("torch", "ray", "transformers", "peft", "vllm", "wandb", "mlflow", "tensorboard")


def _imports(path: Path) -> set[str]:
    """Absolute module names imported anywhere in `path` (top level or inside functions)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def _module_file(name: str) -> Path | None:
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:n])
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.exists():
                return candidate
    return None


def _top(name: str) -> str:
    return name.split(".")[0]


def test_engine_imports_no_service_code():
    offenders = {str(p.relative_to(ROOT)): sorted(n for n in _imports(p) if _top(n) in ("api", "workers", "core"))
                 for p in (ROOT / "engine").rglob("*.py")}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_api_reaches_no_heavy_or_engine_module_transitively():
    """Follow project-internal imports from every api module; none may reach torch/ray/... or engine."""
    seen: set[Path] = set()
    stack = [(p, (str(p.relative_to(ROOT)),)) for p in (ROOT / "api").rglob("*.py")]
    bad = []
    while stack:
        path, chain = stack.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in _imports(path):
            top = _top(name)
            if top in HEAVY or top == "engine":
                bad.append(" -> ".join(chain + (name,)))
            elif top in PROJECT:
                target = _module_file(name)
                if target is not None and target not in seen:
                    stack.append((target, chain + (str(target.relative_to(ROOT)),)))
    assert bad == []


def test_importing_the_api_loads_no_heavy_module():
    code = ("import sys, api.main; heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
            f"{HEAVY!r} or m.split('.')[0] == 'engine'); print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_engine_algos_imports_with_only_torch():
    code = ("import sys, engine.algos; bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('transformers', 'peft', 'ray', 'api', 'core', 'workers')); print(bad)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_no_test_module_imports_a_conftest():
    """Importing a conftest by name runs it a second time: tests/conftest.py would pick a new database
    and namespace for every process started afterwards (the session's Celery worker included)."""
    offenders = []
    for path in (ROOT / "tests").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n == "conftest" or n.endswith(".conftest") for n in names):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Project module -> the project modules it imports (relative imports resolved; `from pkg import name`
    is an edge to `pkg.name` when that is a module, else to `pkg`)."""
    modules = {_module_name(p): p for top in (*PROJECT, "sdk") for p in (ROOT / top).rglob("*.py")}

    def resolve(name: str) -> str | None:
        parts = name.split(".")
        return next((m for n in range(len(parts), 0, -1) if (m := ".".join(parts[:n])) in modules), None)

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        targets: set[str | None] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(resolve(a.name) for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = (".".join(package[:len(package) - node.level + 1] + [node.module or ""]).strip(".")
                        if node.level else node.module or "")
                targets.update(resolve(f"{base}.{a.name}") for a in node.names)
        graph[module] = {t for t in targets if t is not None and t != module}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def test_no_import_cycles():
    """No two project modules import each other, directly or around a longer circle.

    Every import statement counts: top level, inside a function, or under `if TYPE_CHECKING:`. A deferred
    import only hides a circle from the interpreter (and `TYPE_CHECKING` from the interpreter alone); the two
    modules still cannot be read, tested or moved one without the other. Importing `a.b.c` is an edge to
    `a.b.c` only, not to the packages `a` and `a.b` it also runs."""
    cycles = _cycles(_import_graph())
    assert cycles == [], "import circles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_cycle_finder_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


MAX_MODULE_LINES = 500
SIZED = (*PROJECT, "sdk/extra", "scripts", "tests")
"""Where every module is hand-written; the generated SDK (sdk/keel_client) is not checked."""


def _long_modules(root: Path, folders: tuple[str, ...]) -> dict[str, int]:
    """Modules under `folders` of `root` longer than MAX_MODULE_LINES: relative path -> lines."""
    sizes = {str(p.relative_to(root)): len(p.read_text().splitlines())
             for folder in folders for p in (root / folder).rglob("*.py")}
    return {path: n for path, n in sorted(sizes.items()) if n > MAX_MODULE_LINES}


def test_every_hand_written_module_is_at_most_500_lines():
    """A module past 500 lines holds more than one thing: split it by what its parts describe."""
    assert _long_modules(ROOT, SIZED) == {}


def test_the_size_check_finds_a_long_module(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "short.py").write_text("x = 1\n" * MAX_MODULE_LINES)
    (tmp_path / "pkg" / "long.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    assert _long_modules(tmp_path, ("pkg",)) == {"pkg/long.py": MAX_MODULE_LINES + 1}
