"""What was chosen when each side of a comparison was made or analysed, and how two sides differ in it: `diff`
names every difference, `check` warns when its baseline ran with other run options."""

from __future__ import annotations

from llmdiag.diagnose.model.analysis import Analysis


def settings(a: Analysis, run_defaults: dict | None = None) -> dict[str, str]:
    """What was chosen when the side was made or analysed, as text: analysis options, the run's options,
    workload, schedule, versions. A run option the side's manifest does not record came with a later llmdiag than
    the one that made the run: it reads as its default (`run_defaults`, from `llmdiag run`'s option table), the
    value that keeps the older behaviour, so it is never reported as a difference merely for being new."""
    out = {"exclude last step": "on" if a.options.exclude_last_step else "off",
           "extra comm regex": a.options.comm_regex or "none"}
    pv = a.provenance
    if pv is not None:
        out.update({f"analyze {k}": str(v) for k, v in pv.options.items() if k not in ("exclude_last_step",
                                                                                       "comm_regex")})
    m = a.manifest
    if m is not None:
        out["workload"] = str(m.workload)
        opts = m.options if isinstance(m.options, dict) else {}
        out.update({f"run option {k}": str(v) for k, v in {**(run_defaults or {}), **opts}.items()})
    if a.pipeline:
        out["pipeline schedule"] = f"{a.pipeline.schedule}, m={a.pipeline.microbatches}"
    out["llmdiag"] = a.llmdiag_version or "?"
    return out


def differences(a: Analysis, b: Analysis, run_defaults: dict | None = None) -> list[str]:
    """'name: A x, B y' for every setting that differs, or is known on one side only."""
    x, y = settings(a, run_defaults), settings(b, run_defaults)
    return [f"{k}: A {x.get(k, 'not recorded')}, B {y.get(k, 'not recorded')}" for k in [*x, *(k for k in y if k
            not in x)] if x.get(k) != y.get(k)]


def run_differences(baseline: Analysis, current: Analysis, run_defaults: dict | None = None) -> list[str]:
    """How the runs were made differently: workload and the run options, an option one manifest predates read as
    its default (see `settings`). Numbers of runs made differently are not a regression signal by themselves."""
    x, y = settings(baseline, run_defaults), settings(current, run_defaults)
    keys = [k for k in x if k in y and (k == "workload" or k.startswith("run option ")) and x[k] != y[k]]
    return [f"{k.removeprefix('run option ')}: A {x[k]}, B {y[k]}" for k in keys]
