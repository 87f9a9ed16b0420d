"""Checks a `check --json` report (and its --junit twin) after a run with a
misbehaving plug-in: both files parse, the plug-in's first finding has the
expected kind and a reproducer that loads it, and the built-in backend ran
every case and passed (its row survived the plug-in's deaths).

usage: check_findings.py REPORT.json REPORT.xml BACKEND KIND BUILTIN
"""
import json
import sys
import xml.etree.ElementTree as ET


def main(json_path, junit_path, backend, kind, builtin):
    with open(json_path) as f:
        doc = json.load(f)
    found = [x for x in doc["failures"] if x["backend"] == backend]
    assert found, "no finding for %s in %s" % (backend, json_path)
    first = found[0]
    assert first["outcome"] == kind, first
    assert "--plugin" in first["reproducer"], first["reproducer"]
    assert "--backends " + backend in first["reproducer"], first["reproducer"]
    rows = {b["name"]: b for b in doc["backends"]}
    assert rows[backend]["deaths"] >= 1 or kind not in (
        "crash", "exit", "timeout"), rows[backend]
    ran = rows[builtin]
    assert ran["cases"] == doc["summary"]["cases"] and ran["failures"] == 0, ran
    tree = ET.parse(junit_path)
    types = [f.get("type") for f in tree.iter("failure")]
    assert kind in types, types
    print("findings ok: %s %s, %s ran %d cases" % (backend, kind, builtin,
                                                   ran["cases"]))


if __name__ == "__main__":
    main(*sys.argv[1:])
