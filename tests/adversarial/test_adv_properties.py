"""Property tests over the untrusted-input readers added for the adversarial suite (`make fuzz` runs them with
LLMDIAG_FUZZ_EXAMPLES fresh examples; 200 derandomized ones by default, as tests/unit/test_properties.py):

- the meta yaml reader on arbitrary text and on yaml-shaped text: only LlmdiagError (one line) escapes, and
  what it returns has sizes within 1..MAX_WORLD;
- the demangler on mangled-looking names built from Itanium pieces: a string back, at most OUT_CAP long, and
  the name itself wherever it cannot be demangled within the bound.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmdiag.diagnose.errors import LlmdiagError
from llmdiag.diagnose.model import names

pytest.importorskip("yaml")
from llmdiag.diagnose.io.megatron_ops import SIZES, read_meta
from llmdiag.diagnose.model.manifest import MAX_WORLD

EXAMPLES = int(os.environ.get("LLMDIAG_FUZZ_EXAMPLES", "200"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize="LLMDIAG_FUZZ_SEED" not in os.environ,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

KEYS = st.sampled_from(list(SIZES) + ["trial_name", "run_id", "x"])
VALUES = st.one_of(st.integers(-2**70, 2**70), st.floats(), st.text(max_size=20), st.booleans(), st.none(),
                   st.sampled_from(["&a [1, 2]", "*a", "!!python/object:os.system", "[[[[", "{a: 1}", "1e11",
                                    "0x10", "0o7", "1_000", ".inf", "~"]))
YAMLISH = st.lists(st.tuples(KEYS, VALUES), max_size=10).map(lambda kv: "".join(f"{k}: {v}\n" for k, v in kv))


@SETTINGS
@given(text=st.one_of(YAMLISH, st.text(max_size=300), st.binary(max_size=300).map(lambda b: b.decode("latin-1"))))
def test_meta_reader_fails_in_one_line_or_returns_bounded_sizes(tmp_path, text):
    p = tmp_path / "meta-x.yaml"
    p.write_text(text, encoding="utf-8", errors="surrogateescape")
    try:
        meta = read_meta(str(p))
    except LlmdiagError as e:
        assert "\n" not in e.line()
        return
    for k in SIZES:
        assert meta.get(k) is None or (type(meta[k]) is int and 1 <= meta[k] <= MAX_WORLD)
    assert meta["dp_size"] >= 1 and meta["pp_size"] >= 1


PIECES = ["S_", "S0_", "S1_", "S2_", "T_", "T0_", "I", "E", "N", "1A", "1B", "3foo", "i", "v", "P", "R", "K",
          "St", "Sa", "L", "Li1E", "J", "Dp", "_"]


@SETTINGS
@given(body=st.lists(st.sampled_from(PIECES), max_size=60).map("".join))
def test_demangle_is_bounded_and_total(body):
    name = "_Z1f" + body
    out = names.demangle_many([name, "aten::mm"])
    assert out["aten::mm"] == "aten::mm"
    assert isinstance(out[name], str) and len(out[name]) <= max(names.OUT_CAP, len(name))
