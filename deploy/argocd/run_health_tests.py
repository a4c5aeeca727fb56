#!/usr/bin/env python3
"""Runs Argo CD health_test.yaml files against their health.lua, the way
Argo CD does (the script sees the object as the global `obj`).

Needs `pip install lupa pyyaml` (Lua 5.4 via lupa). Usage:
    python3 deploy/argocd/run_health_tests.py
Exits non-zero on the first mismatch.
"""
import pathlib
import sys

import lupa
import yaml

ROOT = pathlib.Path(__file__).resolve().parent


def to_lua(lua, value):
    if isinstance(value, dict):
        return lua.table_from({k: to_lua(lua, v) for k, v in value.items()})
    if isinstance(value, list):
        return lua.table_from([to_lua(lua, v) for v in value])
    return value


DOCS = ROOT.parent.parent / "docs" / "api.md"
DOCS_KEY = "resource.customizations.health.etcd.steward.dev_EtcdCluster: |"


def docs_snippet():
    """The argocd-cm snippet in docs/api.md, so it is tested too."""
    lines = DOCS.read_text().splitlines()
    start = next(i for i, l in enumerate(lines) if l.strip() == DOCS_KEY) + 1
    indent = len(lines[start]) - len(lines[start].lstrip())
    body = []
    for line in lines[start:]:
        if line.startswith("```"):
            break
        body.append(line[indent:])
    return "\n".join(body)


def main():
    failures = 0
    for test_file in sorted(ROOT.glob("*/*/health_test.yaml")):
        scripts = {"health.lua": (test_file.parent / "health.lua").read_text()}
        if test_file.parent.name == "EtcdCluster":
            scripts["docs/api.md"] = docs_snippet()
        for source, script in scripts.items():
            failures += run(test_file, source, script)
    sys.exit(1 if failures else 0)


def run(test_file, source, script):
    failures = 0
    for case in yaml.safe_load(test_file.read_text())["tests"]:
        lua = lupa.LuaRuntime(unpack_returned_tuples=True)
        obj = yaml.safe_load((test_file.parent / case["inputPath"]).read_text())
        lua.globals().obj = to_lua(lua, obj)
        result = lua.execute(script)
        got = {"status": result["status"], "message": result["message"]}
        want = case["healthStatus"]
        ok = got == want
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} [{source}] {test_file.parent.name}/{case['inputPath']}: {got}")
        if not ok:
            print(f"     want {want}")
    return failures


if __name__ == "__main__":
    main()
