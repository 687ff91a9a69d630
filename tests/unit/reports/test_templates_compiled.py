"""The report's templates are compiled once per user and template version, never again per run (issue 37):
`analyze --report` loads them from the user's own cache folder, an edited template compiles once more (never
stale code), and the folder is used only when it is this user's own, private, and reached without a link.

The runs count `jinja2.Environment.compile` calls in a fresh interpreter: a process is what a user runs, and an
in-process Environment keeps its templates in memory, which would hide a compile per run."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest

from benchmarks import generate
from llmdiag.reports import render, template_cache
from tests.conftest import REAL

ROOT = Path(__file__).resolve().parents[3]
_COUNT = """
import atexit, sys, jinja2
n = [0]
compile_ = jinja2.Environment.compile
def counting(self, *a, **k):
    n[0] += 1
    return compile_(self, *a, **k)
jinja2.Environment.compile = counting
atexit.register(lambda: print(f"COMPILES {n[0]} MODULES {' '.join(sorted(sys.modules))}", file=sys.stderr))
sys.argv = ["llmdiag", *sys.argv[1:]]
from llmdiag.diagnose.cli.main import main
main()
"""


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> str:
    return generate.write_set(str(tmp_path_factory.mktemp("t") / "one"), ranks=1, mb=0.05, steps=2, jobs=1)[0]


def _analyze(trace: str, out: Path, cache: Path, report: bool = True, modules: set | None = None) -> int:
    """`analyze TRACE --json --report` in a fresh interpreter with XDG_CACHE_HOME=cache: its compile count
    (and the modules it imported, into `modules`)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), XDG_CACHE_HOME=str(cache))
    args = ["analyze", trace, "-q", "--json", str(out / "s.json")]
    args += ["--report", str(out / "r.html")] if report else ["--no-report"]
    done = subprocess.run([sys.executable, "-c", _COUNT, *args], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    if report:
        assert (out / "r.html").stat().st_size > 10_000
    count, mods = done.stderr.rsplit("COMPILES ", 1)[1].split(" MODULES ", 1)
    if modules is not None:
        modules.update(mods.split())
    return int(count)


def _undated(path: Path) -> str:
    return re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[^<\"]*", "T", path.read_text())


def test_no_template_is_compiled_in_a_run(trace, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    first = _analyze(trace, tmp_path, cache)
    assert first >= 4  # the report and its included templates, compiled once for this user: the counter counts
    html = _undated(tmp_path / "r.html")
    assert _analyze(trace, tmp_path, cache) == 0
    assert _analyze(trace, tmp_path, cache) == 0
    assert _undated(tmp_path / "r.html") == html  # the same report from the loaded code as from the compiled
    folder = cache / "llmdiag" / "templates"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and stat.S_IMODE(folder.parent.stat().st_mode) == 0o700
    entries = os.listdir(folder)
    assert len(entries) == first and all(e.endswith(".jinja") for e in entries)
    assert all(stat.S_IMODE((folder / e).stat().st_mode) == 0o600 for e in entries)


@pytest.mark.real
def test_the_whole_command_on_a_real_pair_compiles_nothing_and_skips_numpy_ma(tmp_path):
    """HTA's event-sampled pair (kernels whose launch fell outside the capture): the check for launchless
    kernels used np.isin, whose sort path imports numpy.ma (~20 ms, a tenth of that command's analysis), and
    the report imported the manifest's and the what-if's model types for every run."""
    cache = tmp_path / "cache"
    cache.mkdir()
    pair = os.path.join(REAL, "hta", "sampled_pair")
    _analyze(pair, tmp_path, cache)
    mods: set = set()
    assert _analyze(pair, tmp_path, cache, modules=mods) == 0
    assert "llmdiag.reports.render" in mods and "llmdiag.diagnose.metrics.rank.before_capture" in mods
    assert "numpy.ma" not in mods
    # nor the model types of a manifest or a what-if, which a folder of Kineto traces has neither of
    assert not {"llmdiag.diagnose.model.manifest", "llmdiag.diagnose.model.whatif"} & mods


def _diff(a: Path, b: Path, out: Path, cache: Path) -> int:
    """`diff A B --html` in a fresh interpreter with XDG_CACHE_HOME=cache: its compile count."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), XDG_CACHE_HOME=str(cache))
    args = ["diff", str(a), str(b), "--html", str(out / "d.html")]
    done = subprocess.run([sys.executable, "-c", _COUNT, *args], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1), done.stderr  # 1: the diff found a regression; the page is written either way
    assert (out / "d.html").read_text().startswith("<!DOCTYPE html>")
    return int(done.stderr.rsplit("COMPILES ", 1)[1].split(" MODULES ", 1)[0])


def test_diff_html_compiles_its_template_once_per_user(trace, tmp_path):
    """`llmdiag diff --html` compiled diff.html.j2 on every run; it now shares the report's cache."""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    _analyze(trace, tmp_path, cache, report=False)
    summary = tmp_path / "s.json"
    assert _diff(summary, summary, tmp_path, cache) >= 1  # cold: compiled once, the counter counts
    html = _undated(tmp_path / "d.html")
    assert _diff(summary, summary, tmp_path, cache) == 0
    assert _undated(tmp_path / "d.html") == html
    assert len(os.listdir(cache / "llmdiag" / "templates")) == 1  # diff.html.j2's entry, nothing else


def test_no_report_writes_no_cache(trace, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    assert _analyze(trace, tmp_path, cache, report=False) == 0
    # no templates: the dataclasses' code (diagnose/model/code_cache.py) is all that is kept
    kept = [p.relative_to(cache).as_posix() for p in cache.rglob("*")]
    assert all(k in ("llmdiag", "llmdiag/code") or k.startswith("llmdiag/code/dataclasses-") for k in kept), kept


def _render(folder: Path, home: Path, name: str = "t.html.j2") -> tuple[str, int]:
    """A fresh Environment as the report builds it (no templates in memory), over `folder`: its output and
    the number of compiles it took."""
    env = render._env(str(folder), str(home))
    calls = []
    compile_ = env.compile
    env.compile = lambda *a, **k: calls.append(1) or compile_(*a, **k)  # type: ignore[method-assign]
    return env.get_template(name).render(x=2), len(calls)


def test_an_edited_template_compiles_again_never_stale(tmp_path):
    """A checkout or editable install where a template changes: the next run renders the new text."""
    folder, home = tmp_path / "templates", tmp_path / "home"
    folder.mkdir()
    home.mkdir()
    t = folder / "t.html.j2"
    t.write_text("one {{ x }}\n")
    assert _render(folder, home) == ("one 2", 1)
    assert _render(folder, home) == ("one 2", 0)
    t.write_text("two {{ x * 2 }}\n")  # within the same second: the check is the source, not the mtime
    assert _render(folder, home) == ("two 4", 1)
    assert _render(folder, home) == ("two 4", 0)
    t.write_text("one {{ x }}\n")  # back to the first text: its entry was replaced, compiled once more
    assert _render(folder, home) == ("one 2", 1)


def test_other_options_or_jinja_version_get_other_entries(tmp_path, monkeypatch):
    env = render._env(str(tmp_path), str(tmp_path))
    key = env.bytecode_cache.get_cache_key("report.html.j2", "/x/report.html.j2")
    other = jinja2.Environment(loader=jinja2.FileSystemLoader(str(tmp_path)), autoescape=True,
                               trim_blocks=False, lstrip_blocks=True)
    assert template_cache.fingerprint(other) != template_cache.fingerprint(env)
    monkeypatch.setattr(jinja2, "__version__", "9.9.9")
    assert template_cache.fingerprint(env) != env.bytecode_cache.fingerprint
    assert template_cache.TemplateCache(template_cache.fingerprint(env)).get_cache_key(
        "report.html.j2", "/x/report.html.j2") != key


def _template_in(tmp_path: Path) -> Path:
    folder = tmp_path / "templates"
    folder.mkdir()
    (folder / "t.html.j2").write_text("ok {{ x }}\n")
    return folder


def test_a_link_on_the_way_turns_the_cache_off(tmp_path):
    """`<cache>/llmdiag` planted as a link to a victim folder: nothing is created or written through it."""
    home, victim = tmp_path / "home", tmp_path / "victim"
    home.mkdir()
    victim.mkdir(mode=0o755)
    (home / "llmdiag").symlink_to(victim)
    folder = _template_in(tmp_path)
    assert template_cache.open_folder(str(home)) is None
    assert _render(folder, home) == ("ok 2", 1)
    assert _render(folder, home) == ("ok 2", 1)  # no cache: compiled in memory each time, as before
    assert os.listdir(victim) == [] and stat.S_IMODE(victim.stat().st_mode) == 0o755


def test_a_last_folder_linked_elsewhere_is_refused(tmp_path):
    home, victim = tmp_path / "home", tmp_path / "victim"
    (home / "llmdiag").mkdir(parents=True, mode=0o700)
    victim.mkdir(mode=0o700)
    (home / "llmdiag" / "templates").symlink_to(victim)
    assert template_cache.open_folder(str(home)) is None
    assert _render(_template_in(tmp_path), home)[1] == 1 and os.listdir(victim) == []


def test_a_folder_open_to_others_is_not_used(tmp_path):
    home = tmp_path / "home"
    (home / "llmdiag" / "templates").mkdir(parents=True)
    os.chmod(home / "llmdiag" / "templates", 0o777)
    assert template_cache.open_folder(str(home)) is None
    folder = _template_in(tmp_path)
    assert _render(folder, home)[1] == 1 and os.listdir(home / "llmdiag" / "templates") == []


def test_a_folder_owned_by_someone_else_is_not_used(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setattr(os, "getuid", lambda: os.stat(home).st_uid + 1)
    assert template_cache.open_folder(str(home)) is None


def test_a_planted_entry_link_is_neither_read_nor_written_through(tmp_path):
    home, victim = tmp_path / "home", tmp_path / "victim"
    home.mkdir()
    victim.write_bytes(b"keep")
    folder = _template_in(tmp_path)
    env = render._env(str(folder), str(home))
    key = env.bytecode_cache.get_cache_key("t.html.j2", str(folder / "t.html.j2"))
    entries = home / "llmdiag" / "templates"
    entries.mkdir(parents=True, mode=0o700)
    (entries / f"{key}.jinja").symlink_to(victim)
    assert _render(folder, home) == ("ok 2", 1)
    assert victim.read_bytes() == b"keep"
    assert not (entries / f"{key}.jinja").is_symlink()  # the link itself was replaced by the entry
    assert _render(folder, home) == ("ok 2", 0)


def test_a_broken_entry_is_compiled_again(tmp_path):
    home, folder = tmp_path / "home", _template_in(tmp_path)
    home.mkdir()
    assert _render(folder, home)[1] == 1
    (entry,) = (home / "llmdiag" / "templates").iterdir()
    entry.write_bytes(entry.read_bytes()[:40])  # truncated
    assert _render(folder, home) == ("ok 2", 1)
    assert _render(folder, home) == ("ok 2", 0)


def test_no_home_no_cache(monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/is/ignored")
    monkeypatch.setenv("HOME", "")
    monkeypatch.setattr(os.path, "expanduser", lambda p: p)
    assert template_cache.cache_home() is None and template_cache.open_folder() is None
