#!/usr/bin/env bash
# The Python SDK's own unit tests (tests/test_sdk.py: what YAML cases cannot
# reach), run natively against the bindings componentize-py generates
# (build.sh --bindings, which installs the pinned tools on first use); no
# component is built. The example's, the template's and testdata/'s YAML
# cases run through built components with `etcd-steward policy test`
# (host/tests/sdk_examples.rs, host/tests/policy_new.rs).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# The generated bindings use typing.Self; the SDK uses match.
python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
    echo "test.sh: python3 >= 3.11 is required to run the unit tests natively" >&2
    exit 1
}
bindings=$(mktemp -d "${TMPDIR:-/tmp}/steward-policy-bindings.XXXXXX")
trap 'rm -rf "$bindings"' EXIT
"$here/build.sh" --bindings "$bindings"
cd "$here"
PYTHONPATH="$bindings:$here" PYTHONDONTWRITEBYTECODE=1 python3 -m unittest discover -s tests "$@"
