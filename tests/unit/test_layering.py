"""The code's shape, checked: data flows one way (io → metrics → rules → gate → cli), no import cycle, no
module reaching back up a stage, the worker's metrics (`metrics.rank`: one trace) below the coordinator's
(`metrics.job`: all ranks), an engine that runs any function and knows no metric, the report independent of the
rules, the training side independent of the analyzer, one import name (`llmdiag`), and no module grown past
what one reader holds in mind.

Imports are read with `ast` from every .py file, lazy imports inside functions included: a cycle hidden in a
function body is still a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("diagnose", "reports", "workloads")  # the card's folders, installed as llmdiag.<folder>
D = "llmdiag.diagnose"
# Stage of each part of diagnose/: a module may import its own part and lower stages only. The engine sits
# above the metrics in the order the analysis runs, but imports none of them (test_engine_knows_no_metric).
STAGES = {D: 0, f"{D}.errors": 0, f"{D}.model": 1, f"{D}.io": 2, f"{D}.metrics.rank": 3, f"{D}.metrics.job": 3.2,
          f"{D}.simulate": 3.5, f"{D}.rules": 4, f"{D}.engine": 4.5, f"{D}.analyze": 5,
          f"{D}.export": 5.5, f"{D}.gate": 6, f"{D}.cli": 7}
REPORTS_MAY_IMPORT = (D, f"{D}.errors", f"{D}.model")
ENGINE_MAY_IMPORT = (f"{D}.engine", f"{D}.errors", f"{D}.io", f"{D}.model.files")
MAX_LINES = 400


def _module_name(path: Path) -> str:
    parts = ["llmdiag", *path.relative_to(ROOT).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The project module an import refers to (`from llmdiag.diagnose.io import cache` -> ...io.cache)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(mod: str) -> set[str]:
    tree = ast.parse(MODULES[mod].read_text(encoding="utf-8"))
    pkg = mod if MODULES[mod].name == "__init__.py" else mod.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(pkg.split(".")[: len(pkg.split(".")) - node.level + 1] + ([base] if base else []))
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for n in names:
            if n.startswith("llmdiag.") and (r := _resolve(n)) and r != mod:
                out.add(r)
    return out


GRAPH = {m: _imports(m) for m in MODULES}


def _stage(mod: str) -> tuple[str, int] | None:
    for part in sorted(STAGES, key=len, reverse=True):
        if mod == part or mod.startswith(part + "."):
            return part, STAGES[part]
    return None


def _cycles() -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    return out


def test_the_walk_sees_the_code():
    assert {"llmdiag.diagnose.model.analysis", "llmdiag.diagnose.io.loader", "llmdiag.diagnose.rules", "llmdiag.reports.render"} <= set(MODULES)
    assert "llmdiag.diagnose.model.analysis" in GRAPH["llmdiag.diagnose.rules.base"]
    assert "llmdiag.diagnose.io.split_parse" in GRAPH["llmdiag.diagnose.io.loader"]  # a lazy import inside a function counts


def test_no_import_cycle():
    assert _cycles() == []


def test_no_upward_import():
    bad = []
    for mod, deps in GRAPH.items():
        src = _stage(mod)
        if src is None:
            continue
        for dep in deps:
            dst = _stage(dep)
            if dst is not None and dst[1] > src[1]:
                bad.append(f"{mod} -> {dep}")
            if dst is not None and dst[1] == src[1] and dst[0] != src[0]:
                bad.append(f"{mod} -> {dep} (sideways between stages)")
    assert bad == []


def test_reports_read_only_the_model():
    bad = [f"{m} -> {d}" for m, deps in GRAPH.items() if m.startswith("llmdiag.reports") for d in deps
           if not d.startswith("llmdiag.reports") and _stage(d) and _stage(d)[0] not in REPORTS_MAY_IMPORT]
    assert bad == []


def test_nothing_imports_the_cli_and_the_analyzer_never_imports_training_code():
    bad = [f"{m} -> {d}" for m, deps in GRAPH.items() for d in deps
           if d.startswith(f"{D}.cli") and not m.startswith(f"{D}.cli")]
    bad += [f"{m} -> {d}" for m, deps in GRAPH.items() for d in deps if d.startswith("llmdiag.workloads")
            and m.startswith((D, "llmdiag.reports")) and not m.startswith(f"{D}.cli")]
    bad += [f"{m} -> {d}" for m, deps in GRAPH.items() for d in deps
            if m.startswith("llmdiag.workloads") and d.startswith((D, "llmdiag.reports"))]
    assert bad == []


def test_the_worker_never_imports_the_coordinator():
    """metrics.rank (one trace, in a pool or Dask worker) never imports metrics.job (all ranks): a worker loads
    only what one trace needs, and nothing of the coordinator's runs where the trace is."""
    bad = [f"{m} -> {d}" for m, deps in GRAPH.items() if m.startswith(f"{D}.metrics.rank") for d in deps
           if d.startswith(f"{D}.metrics.job")]
    assert bad == []
    assert {f"{D}.metrics.rank.per_rank", f"{D}.metrics.job.cross_rank"} <= set(MODULES)
    assert not [m for m in MODULES if m.startswith(f"{D}.metrics.") and not m.startswith((f"{D}.metrics.rank",
                                                                                          f"{D}.metrics.job"))]


def test_engine_knows_no_metric():
    """The engine runs any function over jobs (analyze.py hands it the worker's): it imports only errors, io
    (file sizes) and model.files, so a process pool never sits above the metrics it runs."""
    bad = [f"{m} -> {d}" for m, deps in GRAPH.items() if m.startswith(f"{D}.engine") for d in deps
           if not d.startswith(ENGINE_MAY_IMPORT)]
    assert bad == []


def test_one_import_name():
    """Every import of the project's code goes through `llmdiag`: a bare `diagnose`, `reports` or `workloads`
    would load the same files a second time under other names (their __init__ refuses it)."""
    bad = []
    for root in ("diagnose", "reports", "workloads", "tests", "benchmarks"):
        for p in (ROOT / root).rglob("*.py"):
            for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                         [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
                bad += [f"{p.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in PACKAGES]
    assert bad == []


@pytest.mark.parametrize("mod", sorted(MODULES))
def test_module_size(mod):
    n = len(MODULES[mod].read_text(encoding="utf-8").splitlines())
    assert n <= MAX_LINES, f"{MODULES[mod].relative_to(ROOT)} has {n} lines: split it by what it computes"
