#!/usr/bin/env bash
# Builds a JS status policy into a WebAssembly component:
#
#   policies/js/build.sh OUT.wasm [POLICY_DIR]     (default: examples/db-headroom)
#   policies/js/build.sh --tools                   (only install the pinned tools)
#
# POLICY_DIR holds policy.js. It imports the SDK either from ./sdk/ beside it
# (a project written by `etcd-steward policy new --lang js`) or from this
# directory's sdk/ (the examples). The component targets ../../wit, world
# status-policy, with every WASI feature componentize-js can drop disabled
# (stdio, random, clocks, http, fetch-event): it imports nothing the host must
# grant. The pinned tools are installed on first use (see scripts/tools.sh);
# on success nothing is printed.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# --tools: only install the pinned tools (`make test` does, before its tests
# run where the network may not be).
if [ "${1:-}" = --tools ]; then
  . "$here/scripts/tools.sh"
  steward_js_tools "$here" >/dev/null
  exit 0
fi
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 OUT.wasm [POLICY_DIR] | $0 --tools" >&2
  exit 2
fi
mkdir -p "$(dirname "$1")"
out=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
dir=$(cd "${2:-$here/examples/db-headroom}" && pwd)
wit=$(cd "$here/../../wit" && pwd)
[ -f "$dir/policy.js" ] || { echo "$dir has no policy.js" >&2; exit 2; }

# componentize-js lets the module load files under its working directory
# only, so that directory must hold both policy.js and the SDK it imports.
if [ -d "$dir/sdk" ]; then
  workspace=$dir
else
  workspace=$here
fi
case $dir/ in
  "$workspace"/*) ;;
  *) echo "$dir has no sdk/ and is not under $here: its SDK imports cannot be resolved" >&2; exit 2 ;;
esac
entry=${dir#"$workspace"}/policy.js
entry=${entry#/}

. "$here/scripts/tools.sh"
modules=$(steward_js_tools "$here")

log=$(mktemp)
trap 'rm -f "$log" "$out.tmp"' EXIT
# componentize-js reports a syntax error without its place; node names it.
if ! node --input-type=module --check <"$dir/policy.js" 2>"$log"; then
  sed "s|^\[stdin\]|$dir/policy.js|" "$log" >&2
  exit 1
fi
if ! (cd "$workspace" && node "$modules/@bytecodealliance/componentize-js/src/cli.js" \
      "$entry" \
      --wit "$wit" --world-name status-policy \
      --out "$out.tmp" \
      --disable stdio random clocks http fetch-event) >"$log" 2>&1; then
  cat "$log" >&2
  echo "building $dir/policy.js failed" >&2
  exit 1
fi
mv "$out.tmp" "$out"
