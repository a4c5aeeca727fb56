#!/usr/bin/env bash
# Prints the directory holding the etcd releases that member Pods, the tests
# and the sandbox run: one subdirectory per version (`3.6.17/etcd`, `etcdctl`,
# `etcdutl`) and `default`, a link to the release the operator defaults to
# (the newest 3.6, DEFAULT_ETCD_VERSION in host/src/api/cluster.rs).
#
# Each release is built from the go.etcd.io/etcd modules that
# tests/etcd/<minor>/go.mod pins, once, into the cache, keyed by a hash of
# that module and this script; a fresh clone with the same modules reuses
# them. One module per minor, because a Go module holds one version of
# go.etcd.io/etcd/server/v3. The local kubelet picks the release from a
# member's image tag (docs/local-kubelet.md).
#
# ETCD_STEWARD_ETCD_DIR points it at releases you already have, in the same
# layout (at least `default/etcd` and `default/etcdctl`).
set -euo pipefail
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
repo="$(cd "$(dirname "$0")/.." && pwd)"
default_minor=3.6

if [ -n "${ETCD_STEWARD_ETCD_DIR:-}" ]; then
  for b in etcd etcdctl; do
    [ -x "$ETCD_STEWARD_ETCD_DIR/default/$b" ] || {
      echo "ensure-etcd: ETCD_STEWARD_ETCD_DIR=$ETCD_STEWARD_ETCD_DIR has no executable default/$b" >&2; exit 1; }
  done
  echo "$ETCD_STEWARD_ETCD_DIR"; exit 0
fi

root="${ETCD_STEWARD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/etcd-steward}/etcd-releases"
mkdir -p "$root"
say() { echo "ensure-etcd: $*" >&2; }
default_version=
for mod in "$repo"/tests/etcd/*/; do
  minor=$(basename "$mod")
  version=$(sed -n 's#^\s*go.etcd.io/etcd/server/v3 v\([^ ]*\).*$#\1#p' "$mod/go.mod" | head -n1)
  [ -n "$version" ] || { say "tests/etcd/$minor/go.mod requires no go.etcd.io/etcd/server/v3"; exit 1; }
  [ "$minor" = "$default_minor" ] && default_version=$version
  key=$(cat "$mod/go.mod" "$mod/go.sum" "$self" | sha256sum | cut -c1-16)
  out="$root/$version"
  if [ "$(cat "$out/.key" 2>/dev/null)" = "$key" ] \
    && [ -x "$out/etcd" ] && [ -x "$out/etcdctl" ] && [ -x "$out/etcdutl" ]; then
    continue
  fi
  say "building etcd, etcdctl and etcdutl $version from go.etcd.io/etcd (tests/etcd/$minor) into $out"
  tmp="$root/.$version.part.$$"
  rm -rf "$tmp"; mkdir -p "$tmp"
  (
    cd "$mod"
    export CGO_ENABLED=0
    # The release's own version is compiled in (go.etcd.io/etcd/api/v3/version);
    # GitSHA is the one thing a module build cannot know.
    flags=(-trimpath -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=module-v$version")
    go build "${flags[@]}" -o "$tmp/etcd" go.etcd.io/etcd/server/v3
    go build "${flags[@]}" -o "$tmp/etcdctl" go.etcd.io/etcd/etcdctl/v3
    go build "${flags[@]}" -o "$tmp/etcdutl" go.etcd.io/etcd/etcdutl/v3
  ) || { rm -rf "$tmp"; exit 1; }
  echo "$key" >"$tmp/.key"
  got=$("$tmp/etcd" --version | sed -n 's/^etcd Version: //p')
  [ "$got" = "$version" ] || { rm -rf "$tmp"; say "built etcd says it is $got, not $version"; exit 1; }
  rm -rf "$out"; mv "$tmp" "$out"
done
[ -n "$default_version" ] || { say "no tests/etcd/$default_minor module: no default release"; exit 1; }
# Swapped in one rename, so a concurrent reader never sees no link.
ln -sfn "$default_version" "$root/.default.$$" && mv -T "$root/.default.$$" "$root/default"
echo "$root"
