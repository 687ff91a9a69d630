"""model/lazy_re.py: a module-level pattern compiled at its first use (issue 37). It must answer every use as the
compiled pattern does, and the whole command must leave the patterns a trace never searches uncompiled (each
~30-200 µs of a small trace's fixed cost)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from llmdiag.diagnose.model.lazy_re import compiled, lazy_compile
from tests.conftest import REAL

REPO = Path(__file__).resolve().parents[2]
D = "llmdiag.diagnose"
# Searched only for inputs none of HTA's real traces has (a Kineto file name, a Gloo group, a graph node, a
# planted spec, a torn stream's separator, an AMD matrix core, a Python-level optimizer step): uncompiled after
# a whole `analyze --json --report` of nccl_data.
NEVER_ON_NCCL_DATA = [(f"{D}.metrics.job.runs", "KINETO_NAME"), (f"{D}.metrics.job.runs", "HANDLER_NAME"),
                      (f"{D}.metrics.rank.action_costs", "_NODE"), (f"{D}.model.planted", "_SPEC"),
                      (f"{D}.io.stream", "_SEP"), (f"{D}.metrics.rank.classify", "GLOO_RE"),
                      (f"{D}.rules.precision", "_AMD_MATRIX"), (f"{D}.metrics.rank.steps", "OPTIMIZER_STEP_RE")]


def test_a_lazy_pattern_answers_as_the_compiled_one():
    lazy, real = lazy_compile(r"(?P<op>[a-z]+)::(\w+)", re.I), re.compile(r"(?P<op>[a-z]+)::(\w+)", re.I)
    assert not compiled(lazy) and compiled(real)
    s = "x ATEN::mm and c10d::allreduce_"
    assert lazy.search(s).groupdict() == real.search(s).groupdict()
    assert compiled(lazy)
    assert lazy.match(s) is None and lazy.fullmatch("aten::mm").group(2) == "mm"
    assert lazy.findall(s) == real.findall(s) and lazy.sub("-", s) == real.sub("-", s)
    assert [m.span() for m in lazy.finditer(s)] == [m.span() for m in real.finditer(s)]
    assert (lazy.flags, lazy.pattern, lazy.groups, dict(lazy.groupindex)) == (real.flags, real.pattern, 2, {"op": 1})
    assert lazy.search is lazy.__dict__["search"]  # bound once: later uses skip the stand-in
    sep = lazy_compile(rb"\}\s*,\s*\{")  # a bytes pattern (io/stream.py's) over a bytearray
    assert [m.start() for m in sep.finditer(bytearray(b'{"a":1} , {"b":2},{'), 0, 19)] == [6, 16]


def test_a_bad_lazy_pattern_fails_at_its_first_use():
    bad = lazy_compile(r"(unclosed")
    with pytest.raises(re.error):
        bad.search("x")


@pytest.mark.real("hta/nccl_data.json.gz")
def test_patterns_a_trace_never_searches_stay_uncompiled(tmp_path):
    argv = ["analyze", os.path.join(REAL, "hta", "nccl_data.json.gz"), "-q", "-j", "1", "--json",
            str(tmp_path / "s.json"), "--report", str(tmp_path / "r.html")]
    code = ("import importlib, json, runpy, sys\npins = json.loads(sys.argv[2])\n"
            "sys.argv = ['llmdiag', *json.loads(sys.argv[1])]\n"
            "try:\n    from llmdiag.diagnose.cli.main import main\n    main()  # not entry(): it leaves by os._exit\n"
            "except SystemExit as e:\n    assert not e.code, e.code\n"
            "from llmdiag.diagnose.model.lazy_re import compiled\n"
            "print('LAZY', json.dumps({f'{m}.{n}': compiled(getattr(importlib.import_module(m), n)) for m, n in pins}))")
    p = subprocess.run([sys.executable, "-c", code, json.dumps(argv), json.dumps(NEVER_ON_NCCL_DATA)],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.returncode == 0, p.stderr
    state = json.loads(p.stdout.split("LAZY ", 1)[1])
    assert state == {f"{m}.{n}": False for m, n in NEVER_ON_NCCL_DATA}
    assert json.loads((tmp_path / "s.json").read_text())["ranks"] and (tmp_path / "r.html").stat().st_size
