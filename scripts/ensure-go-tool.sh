#!/usr/bin/env bash
# Prints the path of a Go tool the build or the tests run, built from the
# module in tests/<tool>/ that pins it, once, into the cache, keyed by a hash
# of that module and this script; a fresh clone with the same module reuses
# it.
#
#   scripts/ensure-go-tool.sh promtool   # Prometheus's rule checker, for the chart's alerts (docs/alerts.md)
#   scripts/ensure-go-tool.sh crane      # go-containerregistry's image tool, for the operator's image (scripts/build-image.sh)
#   scripts/ensure-go-tool.sh seaweedfs  # SeaweedFS's `weed`, the S3 server of the backup tests (tests/testbed/src/s3.rs)
#
# Each has a module of its own, not tests/kube: Prometheus pins its own
# client-go, SeaweedFS its own gRPC and cloud SDKs, and none may move the
# Kubernetes build's versions.
# promtool is built with -tags remove_all_sd: its rule commands need no
# service discovery, and the cloud SDKs it would link dominate the build.
# SeaweedFS is built with no tags: its tags (elastic, gocdk, rclone, sqlite,
# tikv, ydb, tarantool, rocksdb, foundationdb, 5BytesOffset) only opt in to
# more, and its default filer stores, notification queues and cloud SDKs are
# imported unconditionally, with no tag to leave them out; nor is there a
# smaller main package: `weed` is the one binary of master, volume server,
# filer and S3 gateway. Its cold build is the longest here, about 7 minutes
# on 2 cores (docs/control-plane.md).
#
# ETCD_STEWARD_<TOOL> (ETCD_STEWARD_PROMTOOL, ETCD_STEWARD_CRANE,
# ETCD_STEWARD_SEAWEEDFS) points it at a build you already have.
set -euo pipefail
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
tool=${1:?usage: ensure-go-tool.sh promtool|crane|seaweedfs}
say() { echo "ensure-go-tool: $*" >&2; }

binary=$tool
case "$tool" in
  promtool)
    module=github.com/prometheus/prometheus
    package=github.com/prometheus/prometheus/cmd/promtool
    tags=remove_all_sd
    stamp=github.com/prometheus/common/version.Version ;;
  crane)
    module=github.com/google/go-containerregistry
    package=github.com/google/go-containerregistry/cmd/crane
    tags=
    stamp=github.com/google/go-containerregistry/cmd/crane/cmd.Version ;;
  seaweedfs)
    module=github.com/seaweedfs/seaweedfs
    package=github.com/seaweedfs/seaweedfs/weed
    binary=weed
    tags=
    # `weed version` prints its release number (4.53) and then this.
    stamp=github.com/seaweedfs/seaweedfs/weed/util/version.COMMIT ;;
  *) say "unknown tool $tool (promtool, crane or seaweedfs)"; exit 2 ;;
esac

var="ETCD_STEWARD_$(echo "$tool" | tr '[:lower:]' '[:upper:]')"
if [ -n "${!var:-}" ]; then
  [ -x "${!var}" ] || { say "$var=${!var} is not executable"; exit 1; }
  echo "${!var}"; exit 0
fi

cd "$(dirname "$0")/../tests/$tool"
key=$(cat go.mod go.sum "$self" | sha256sum | cut -c1-16)
root="${ETCD_STEWARD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/etcd-steward}"
out="$root/$tool-$key"
if [ -x "$out/$binary" ]; then
  echo "$out/$binary"; exit 0
fi
version=$(sed -n "s#^\s*$module \(v[^ ]*\).*\$#\1#p" go.mod | head -n1)
say "building $tool $version from tests/$tool into $out"
tmp="$out.part.$$"; trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp"
export CGO_ENABLED=0
go build -trimpath -tags "$tags" -ldflags "-s -w -X $stamp=${version#v}" -o "$tmp/$binary" "$package"
rm -rf "$out"; mv "$tmp" "$out"
echo "$out/$binary"
