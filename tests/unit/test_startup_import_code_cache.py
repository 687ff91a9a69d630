"""The dataclasses' generated functions kept between runs (diagnose/model/code_cache.py, issue 37): a class built
from the cache is the class `exec` would build, a second run compiles none of them, and an unsafe, damaged or
foreign cache file is never loaded."""

from __future__ import annotations

import dataclasses
import inspect
import json
import marshal
import os
import subprocess
import sys
from dataclasses import InitVar, field
from pathlib import Path
from typing import ClassVar

import pytest

from llmdiag.diagnose.model import code_cache, user_cache
from llmdiag.diagnose.model.dc import dataclass

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def state(tmp_path, monkeypatch):
    """A fresh cache state over a cache home of its own; `again()` is the next run's state over the same home."""
    home = str(tmp_path / "cache")

    def again() -> code_cache._State:
        s = code_cache._State(home)
        monkeypatch.setattr(code_cache, "_STATE", s)
        return s

    return again


def _shapes(deco):
    """Classes of every shape the generated __init__ takes: defaults, factories, init=False, kw_only, InitVar,
    ClassVar, __post_init__, frozen (its __setattr__/__delattr__ are generated too)."""

    @deco
    class Plain:
        a: int
        b: str = "x"
        c: list = field(default_factory=list)
        d: float = field(default=0.5, init=False)
        k: ClassVar[int] = 3

    @deco(frozen=True)
    class Frozen:
        a: int
        b: tuple = ()

    @deco(kw_only=True)
    class Kw:
        a: int
        scale: InitVar[float] = 1.0
        b: float = 0.0

        def __post_init__(self, scale):
            self.b = self.a * scale

    return Plain, Frozen, Kw


def _same(x, y) -> None:
    for name in ("__init__", "__setattr__", "__delattr__"):
        fx, fy = x.__dict__.get(name), y.__dict__.get(name)
        assert (fx is None) == (fy is None), name
        if fx is not None:
            assert fx.__code__ == fy.__code__, name  # the very code compile gives for the same text
            assert fx.__annotations__ == fy.__annotations__, name  # types, not strings: no future flag leaked in
            assert inspect.signature(fx) == inspect.signature(fy), name


def test_a_class_built_from_the_cache_is_the_class_exec_builds(state):
    first = state()
    built = _shapes(dataclass)
    assert first.fresh >= 4 and first.folder is not None  # three __init__s, a frozen class's setters
    first.save()
    second = state()
    cached = _shapes(dataclass)
    assert second.fresh == 0 and len(second.used) == len(first.used)  # every text loaded, none compiled
    plain = _shapes(dataclasses.dataclass)  # the standard decorator, its own exec
    assert "exec" not in dataclasses.__dict__  # the cache's exec is set only while a class is decorated
    for b, c, p in zip(built, cached, plain):
        _same(b, c)
        _same(c, p)
    Plain, Frozen, Kw = cached
    assert Plain(1) == Plain(1, "x", []) and Plain(1).d == 0.5 and Plain(2, c=[1]).c == [1]
    with pytest.raises(dataclasses.FrozenInstanceError):
        Frozen(1).a = 2  # type: ignore[misc]
    assert Kw(a=2, scale=3.0).b == 6.0
    with pytest.raises(TypeError):
        Kw(2)  # type: ignore[misc]


def _write(state, data: bytes) -> code_cache._State:
    s = state()
    _shapes(dataclass)
    s.save()
    folder = user_cache.open_folder(s.home, "code")
    assert folder is not None
    os.unlink(code_cache.FILE, dir_fd=folder)
    with os.fdopen(os.open(code_cache.FILE, os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=folder), "wb") as f:
        f.write(data)
    os.close(folder)
    return s


@pytest.mark.parametrize("data", [
    b"\x00garbage", b"",
    marshal.dumps((("other-build", 0, 0), {})),  # another Python's code
    marshal.dumps((code_cache.BUILD, ["not", "a", "dict"])),
])
def test_a_damaged_or_foreign_file_is_not_loaded_and_is_rewritten(state, data):
    _write(state, data)
    s = state()
    _shapes(dataclass)
    assert s.fresh >= 4  # compiled, as without a cache
    s.save()
    assert state().load()  # the next run loads what this one wrote


def test_an_entry_that_is_not_code_is_compiled(state):
    first = state()
    _shapes(dataclass)
    assert first.code is not None
    _write(state, marshal.dumps((code_cache.BUILD, {src: "not code" for src in first.code})))
    s = state()
    built = _shapes(dataclass)
    assert s.fresh >= 4
    for b, p in zip(built, _shapes(dataclasses.dataclass)):
        _same(b, p)


def test_a_link_or_an_open_folder_is_never_read(state, tmp_path):
    first = state()
    _shapes(dataclass)
    first.save()
    folder = Path(first.home) / "llmdiag" / "code"
    elsewhere = tmp_path / "planted.marshal"
    os.replace(folder / code_cache.FILE, elsewhere)
    os.symlink(elsewhere, folder / code_cache.FILE)  # a link where the file was: not followed
    s = state()
    _shapes(dataclass)
    assert s.fresh >= 4
    os.unlink(folder / code_cache.FILE)
    os.replace(elsewhere, folder / code_cache.FILE)
    os.chmod(folder, 0o770)  # a folder others may write: no cache at all, nothing loaded or written
    s = state()
    _shapes(dataclass)
    assert s.folder is None and s.fresh >= 4


_CLASSES = r'''
import json, sys
import llmdiag.diagnose.analyze, llmdiag.diagnose.rules, llmdiag.diagnose.cli.analyze
from llmdiag.diagnose.model import code_cache
out = {}
for name, mod in list(sys.modules.items()):
    if name.startswith("llmdiag."):
        for k, v in vars(mod).items():
            if isinstance(v, type) and v.__module__ == name and "__dataclass_fields__" in v.__dict__:
                f = v.__init__
                out[f"{name}.{k}"] = [f.__code__.co_code.hex(), repr(f.__code__.co_consts), f.__code__.co_names,
                                      f.__code__.co_varnames, sorted(map(str, f.__annotations__.items()))]
print(json.dumps({"fresh": code_cache._STATE.fresh, "classes": out}))
'''


def _classes(home: str) -> dict:
    p = subprocess.run([sys.executable, "-c", _CLASSES], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(REPO), "XDG_CACHE_HOME": home})
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_a_second_process_compiles_none_of_the_analysis_classes_and_builds_the_same(tmp_path):
    """The analysis's dataclasses in three fresh processes: no usable cache home (every text compiled, as the
    standard decorator does), a first run over an empty cache, a second run (all loaded, none compiled)."""
    off = _classes(str(tmp_path / "missing" / "cache"))  # its parent does not exist: no safe folder, no cache
    assert not (tmp_path / "missing").exists()
    first = _classes(str(tmp_path / "cache"))
    second = _classes(str(tmp_path / "cache"))
    assert len(off["classes"]) >= 60 and off["fresh"] >= 60
    assert first["fresh"] == off["fresh"] and second["fresh"] == 0
    assert second["classes"] == off["classes"] == first["classes"]


def test_past_its_bound_the_file_keeps_only_what_the_run_used(state, monkeypatch):
    """Sources edited many times leave texts no class has any more: past MAX_ENTRIES a saving run keeps its own."""
    first = state()
    _shapes(dataclass)
    assert first.code is not None
    stale = {f"# stale {i}\n": compile(f"# stale {i}\n", "<string>", "exec") for i in range(20)}
    first.code.update(stale)
    first.save()
    assert len(state().load()) == len(first.used) + 20  # below the bound: all kept
    monkeypatch.setattr(code_cache, "MAX_ENTRIES", len(first.used) + 5)
    s = state()
    s.load()
    assert s.code is not None
    s.code.update({"# new\n": compile("# new\n", "<string>", "exec")})
    s.fresh = 1
    _shapes(dataclass)
    s.save()
    assert set(state().load()) == set(s.used)  # the stale ones dropped
