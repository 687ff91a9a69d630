"""JUnit XML for `check --junit`: one testcase per gate, so CI test tabs list each gated metric.

The shape is the common subset that GitHub test reporters, GitLab and Jenkins all read:
`<testsuites><testsuite name tests failures errors skipped time><testcase classname name time>` with a
`<failure message type>` (regression), `<skipped message>` (n/a) or `<error message type>` (bad input).
"""

from __future__ import annotations

import socket
import time
import xml.etree.ElementTree as ET

from diagnose.errors import LlmdiagError
from diagnose.gate.verdict import Verdict

SUITE = "llmdiag.check"


def _case_name(r) -> str:
    return f"{r.metric} {r.limit} ({r.agg})"


def _suite(root: ET.Element, cases: list[ET.Element], elapsed: float, props: dict) -> None:
    fails = sum(1 for c in cases if c.find("failure") is not None)
    errors = sum(1 for c in cases if c.find("error") is not None)
    skipped = sum(1 for c in cases if c.find("skipped") is not None)
    counts = {"tests": str(len(cases)), "failures": str(fails), "errors": str(errors),
              "skipped": str(skipped), "time": f"{elapsed:.3f}"}
    root.attrib.update({"name": SUITE, **counts})
    suite = ET.SubElement(root, "testsuite", {
        "name": SUITE, **counts,
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()),
        "hostname": socket.gethostname() or "localhost"})
    if props:
        p = ET.SubElement(suite, "properties")
        for k, v in props.items():
            ET.SubElement(p, "property", {"name": k, "value": str(v)})
    suite.extend(cases)


def _xml(root: ET.Element) -> str:
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def to_junit(v: Verdict, elapsed: float = 0.0) -> str:
    cases = []
    for r in v.results:
        case = ET.Element("testcase", {"classname": f"{SUITE}.{r.metric}", "name": _case_name(r),
                                       "time": "0"})
        detail = (f"baseline: {r.baseline}\ncurrent: {r.current}\ndelta: {r.delta}\n"
                  f"threshold: {r.threshold}\nlimit: {r.limit}\naggregation: {r.agg}\n"
                  f"worst: {r.worst}\n")
        if r.status == "fail":
            ET.SubElement(case, "failure", {"message": r.message, "type": "regression"}).text = detail
        elif r.status == "n/a" and v.strict:
            ET.SubElement(case, "failure", {"message": f"{r.message} (--strict)", "type": "undefined"}).text = detail
        elif r.status == "n/a":
            ET.SubElement(case, "skipped", {"message": r.message})
        else:
            ET.SubElement(case, "system-out").text = r.message
        cases.append(case)
    props = {"current": v.current.source, "baseline": v.baseline.source if v.baseline else None,
             "strict": v.strict, "aggregate_only": v.aggregate_only}
    for i, n in enumerate(v.notes):
        props[f"note{i}"] = n
    root = ET.Element("testsuites")
    _suite(root, cases, elapsed, {k: x for k, x in props.items() if x is not None})
    return _xml(root)


def error_junit(message: str) -> str:
    """A suite with one errored testcase, so CI shows why the gate could not run at all."""
    case = ET.Element("testcase", {"classname": SUITE, "name": "inputs", "time": "0"})
    ET.SubElement(case, "error", {"message": message, "type": "input"}).text = message
    root = ET.Element("testsuites")
    _suite(root, [case], 0.0, {})
    return _xml(root)


def write_text(path: str, text: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise LlmdiagError(f"cannot write: {e.strerror or e}", path) from None
