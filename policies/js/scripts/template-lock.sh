#!/usr/bin/env bash
# Regenerates template/package-lock.json from template/package.json, so a
# scaffolded project installs exactly the tools this directory was tested
# with. Run it after changing template/package.json's dependencies.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# npm refuses "{{name}}" as a package name: lock a stand-in, then put it back.
sed 's/{{name}}/steward-policy-name/g' "$here/template/package.json" >"$tmp/package.json"
(cd "$tmp" && npm install --package-lock-only --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null)
sed 's/steward-policy-name/{{name}}/g' "$tmp/package-lock.json" >"$here/template/package-lock.json"
