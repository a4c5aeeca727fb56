#!/usr/bin/env bash
# The JavaScript SDK's own checks, run by `make test`:
# - its unit tests (scripts/sdk.test.mjs: what YAML cases cannot reach);
# - the template's lock pins what this directory's lock pins.
# The example's and the template's YAML cases run through the built
# component with `etcd-steward policy test` (host/tests/sdk_examples.rs,
# host/tests/policy_new.rs): the host is the one authority on the format.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

node -e '
  const [, dir] = process.argv;
  const pkg = require(dir + "/template/package.json"), lock = require(dir + "/template/package-lock.json");
  const ours = require(dir + "/package-lock.json").packages;
  const bad = JSON.stringify(pkg.devDependencies) !== JSON.stringify(lock.packages[""].devDependencies) ||
    Object.entries(lock.packages).some(([k, v]) => k && ours[k]?.version !== v.version);
  if (bad) { console.error("template/package-lock.json is stale: run scripts/template-lock.sh"); process.exit(1); }
' "$here"
node --test --test-reporter=dot "$here/scripts/sdk.test.mjs"
