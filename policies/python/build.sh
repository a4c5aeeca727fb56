#!/usr/bin/env bash
# Builds a Python status policy into a WebAssembly component.
#
#   build.sh OUT.wasm [POLICY_DIR]
#   build.sh --bindings DIR [POLICY_DIR]
#   build.sh --tools
#
# The second form only writes componentize-py's generated Python bindings
# (the wit_world and componentize_py_types modules steward_policy imports)
# to DIR, for type checkers, IDEs and native unit tests. The third only
# installs the pinned tools.
#
# POLICY_DIR holds app.py, whose module-level `Policy` class is the export
# (see README.md). Default: this script's directory when it holds app.py (a
# project made by `etcd-steward policy new --lang python`), else the
# voters-down example.
#
# By default every WASI import is replaced by a trapping stub (--stub-wasi),
# so the component imports nothing. STEWARD_STUB_WASI=0 keeps the WASI
# imports for the host's deny-all WASI to satisfy instead: fewer core
# instances (14 rather than 38 with componentize-py 0.25.1), and a Python
# traceback reaches stderr, which the host quotes when a policy fails (with
# stubs, printing the traceback itself traps). See README.md.
#
# Needs only python3 (>= 3.9) and PyPI: the pinned tools (requirements.txt)
# go into a venv of their own under ${ETCD_STEWARD_CACHE:-~/.cache/etcd-steward},
# named after the hash of requirements.txt, made once and reused. Prints
# nothing on success.
set -euo pipefail

die() { echo "build.sh: $*" >&2; exit 1; }

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
usage="usage: build.sh OUT.wasm [POLICY_DIR] | build.sh --bindings DIR [POLICY_DIR] | build.sh --tools"
command -v python3 >/dev/null || die "python3 is required"
python3 -c 'import sys; sys.exit(sys.version_info < (3, 9))' || die "python3 >= 3.9 is required"

req=$here/requirements.txt
[ -f "$req" ] || die "$req not found"
key=$(python3 -c 'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest()[:16])' "$req")
cache=${ETCD_STEWARD_CACHE:-$HOME/.cache/etcd-steward}
venv=$cache/python-$key

# A venv appears under its final name only complete (made aside, then
# renamed), so its existence is the check and concurrent builds are safe.
if [ ! -f "$venv/.complete" ]; then
    mkdir -p "$cache"
    tmp=$(mktemp -d "$cache/.python-$key.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    log=$tmp/install.log
    if ! python3 -m venv "$tmp" >"$log" 2>&1; then
        cat "$log" >&2
        die "python3 -m venv failed (Debian and Ubuntu package it apart: apt-get install python3-venv)"
    fi
    if ! "$tmp/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
        --require-hashes -r "$req" >"$log" 2>&1; then
        cat "$log" >&2
        die "installing the tools of $req from PyPI failed"
    fi
    rm -f "$log"
    chmod 755 "$tmp"
    touch "$tmp/.complete"
    # os.rename refuses a non-empty target: a build that won the race keeps its venv.
    python3 -c 'import os, sys
try:
    os.rename(sys.argv[1], sys.argv[2])
except OSError:
    pass' "$tmp" "$venv"
fi

# --tools: only install the pinned tools (`make test` does, before its tests
# run where the network may not be).
if [ "${1:-}" = --tools ]; then
    exit 0
fi

bindings=
if [ "${1:-}" = --bindings ]; then
    [ $# -ge 2 ] || die "$usage"
    bindings=$2
    shift
fi
[ $# -ge 1 ] && [ $# -le 2 ] || die "$usage"
out=$1
if [ $# -eq 2 ]; then
    dir=$2
elif [ -f "$here/app.py" ]; then
    dir=$here
else
    dir=$here/examples/voters-down
fi
[ -f "$dir/app.py" ] || die "$dir/app.py not found: POLICY_DIR must hold the policy's app.py"
dir=$(cd "$dir" && pwd)

# The contract: the project's own copy of wit/ (a scaffolded project is
# self-contained), else the repository's.
wit=
for candidate in "$dir/wit" "$here/wit" "$here/../../wit"; do
    if [ -f "$candidate/status-policy.wit" ]; then
        wit=$(cd "$candidate" && pwd)
        break
    fi
done
[ -n "$wit" ] || die "no wit/status-policy.wit beside $dir/app.py or in the repository"

# The SDK: steward_policy/ beside app.py wins, else the copy beside this script.
sdk=$dir
if [ ! -d "$dir/steward_policy" ]; then
    [ -d "$here/steward_policy" ] || die "steward_policy/ not found beside $dir/app.py or $here"
    sdk=$here
fi

# Through the venv's python rather than the console script, whose shebang
# names the directory the venv was made in.
componentize_py() {
    "$venv/bin/python" -c 'import sys; from componentize_py import script; sys.argv[0] = "componentize-py"; sys.exit(script())' "$@"
}

if [ -n "$bindings" ]; then
    componentize_py -q -d "$wit" -w status-policy bindings "$bindings"
    exit
fi

case ${STEWARD_STUB_WASI:-1} in
    1) stub=(--stub-wasi) ;;
    0) stub=() ;;
    *) die "STEWARD_STUB_WASI must be 1 (default) or 0" ;;
esac

# Build from a copy of the sources: the pre-initialising interpreter writes
# __pycache__ beside every module it imports, and the source tree stays clean.
# The copy holds app.py's directory's modules and packages, and the SDK.
stage=$(mktemp -d "${TMPDIR:-/tmp}/steward-policy-build.XXXXXX")
trap 'rm -rf "$stage" ${tmp:+"$tmp"}' EXIT
for src in "$dir"/*.py "$dir"/*/__init__.py "$sdk/steward_policy/__init__.py"; do
    [ -f "$src" ] || continue
    case $src in
        */__init__.py) cp -R "$(dirname "$src")" "$stage/" ;;
        *) cp "$src" "$stage/" ;;
    esac
done
find "$stage" -name __pycache__ -prune -exec rm -rf {} +

componentize_py -q -d "$wit" -w status-policy componentize app -p "$stage" -o "$out" ${stub[@]+"${stub[@]}"}
