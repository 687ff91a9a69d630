"""JUnit XML for `check --junit`: one testcase per gate, so CI test tabs list each gated metric.

The shape is the common subset that GitHub test reporters, GitLab and Jenkins all read:
`<testsuites><testsuite name tests failures errors skipped time><testcase classname name time>` with a
`<failure message type>` (regression), `<skipped message>` (n/a) or `<error message type>` (bad input).
"""

from __future__ import annotations

import socket
import time
import xml.etree.ElementTree as ET

from llmdiag.diagnose.model.escape import junit_xml
from llmdiag.diagnose.model.files import write_atomic
from llmdiag.diagnose.gate.verdict import Verdict

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
    """The document, every attribute and text escaped for XML 1.0 on the way out (messages quote manifests and
    file names: a control byte there would make the file ill-formed, and CI would show no test results)."""
    for el in root.iter():
        el.attrib.update({k: junit_xml(x) for k, x in el.attrib.items()})
        if el.text:
            el.text = junit_xml(el.text, multiline=True)
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
    for c in v.inputs:  # the reasons not to trust a side: failures unless opted out (gate/inputs.py)
        case = ET.Element("testcase", {"classname": f"{SUITE}.inputs", "name": f"{c.side} {c.reason}", "time": "0"})
        if c.allowed:
            ET.SubElement(case, "skipped", {"message": f"{c.message} (allowed by {c.opt_out})"})
        else:
            ET.SubElement(case, "failure", {"message": c.message, "type": c.reason}).text = (
                c.message + (f"\nopt out: {c.opt_out}\n" if c.opt_out else "\n"))
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
    """Atomically (a temp file renamed): a failed write leaves nothing half-written; one-line errors."""
    write_atomic(path, text)
