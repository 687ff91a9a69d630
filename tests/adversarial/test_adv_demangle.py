"""A demangle bomb: Itanium back-references (`S1_` = an earlier type) nest, so a ~250-byte kernel name
demangles to over 100 MB. Two in a 2-rank trace made `analyze --report` run for minutes (killed at 120 s).
The name below is built here: B<A, ...> with 9 arguments, each level's 9 arguments the level before."""

from __future__ import annotations

import orjson

from tests.adversarial.conftest import attack, check
from tests.gen.builder import gpu_rank


def _sub(i: int) -> str:  # the i-th substitution: S_, S0_, S1_, ... (base 36)
    if i == 0:
        return "S_"
    i -= 1
    digits, s = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ", ""
    while True:
        s, i = digits[i % 36] + s, i // 36
        if not i:
            return f"S{s}_"


def bomb(levels: int = 7, fan: int = 9, fn: str = "f") -> str:
    """f(B<A, A, ...>, B<that, that, ...>, ...): S_ = B, S0_ = A, S1_ = the first B<...>, each level one more."""
    s = f"_Z{len(fn)}{fn}1BI1A" + "S0_" * (fan - 1) + "E"
    for level in range(levels):
        s += "S_I" + _sub(level + 2) * fan + "E"
    return s


def test_the_name_is_a_bomb():
    """The name is small and its demangling, by the number of its arguments, is not: 9^7 A's at least."""
    b = bomb()
    assert len(b) < 300 and b.count("S") > 60
    expanded = {0: "A"}
    for level in range(1, 8):
        expanded[level] = "B<" + ", ".join([expanded[level - 1]] * 9) + ">"
    assert len(expanded[7]) > 10**7


def test_two_bombs_in_a_two_rank_trace(tmp_path):
    run = tmp_path / "run"
    names = [bomb(7, 9), bomb(7, 8)]
    for r in (0, 1):
        b = gpu_rank(r, world_size=2)
        for e in b.events:
            if e.get("name") == "void gemm_kernel<float>()":
                e["name"] = names[r]
        b.write(run / f"rank{r}.json")
    res = attack("analyze", run, "--report", tmp_path / "r.html", "--json", tmp_path / "s.json", cwd=tmp_path)
    line = check(res, 0, "demangling it exceeds its bound")
    assert sum("demangling" in x for x in res.lines) == 1, res.stderr  # said once
    assert line.startswith("llmdiag: kernel name _Z1f1B")
    summary = orjson.loads((tmp_path / "s.json").read_bytes())
    kept = {k["name"] for r in summary["ranks"] for k in r["top_kernels"]}
    assert set(names) <= kept  # the analysis is whole; only the display is mangled
    html = (tmp_path / "r.html").read_text()
    assert names[0][:40] in html and (tmp_path / "r.html").stat().st_size < 5 << 20


def test_twelve_bombs_stay_within_the_per_call_budget(tmp_path):
    """Twelve distinct bombs among the top kernels: the terminal pays at most the budget (2 s), the report
    reads the names it remembered."""
    run = tmp_path / "run"
    names = [bomb(7, 9, f"f{i:02d}") for i in range(12)]
    for r in (0, 1):
        b = gpu_rank(r, world_size=2)
        for i, n in enumerate(names):
            b.kernel(n, 2000 + 10 * i, 5, stream=7)
        b.write(run / f"rank{r}.json")
    res = attack("analyze", run, "--report", tmp_path / "r.html", "--json", tmp_path / "s.json", cwd=tmp_path)
    check(res, 0, "demangling it exceeds its bound")
    assert sum("demangling" in x for x in res.lines) == 1
