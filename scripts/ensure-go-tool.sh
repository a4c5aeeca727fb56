#!/usr/bin/env bash
# Prints the path of a Go tool the build or the tests run, built from the
# module in tests/<tool>/ that pins it, once, into the cache, keyed by a hash
# of that module and this script; a fresh clone with the same module reuses
# it.
#
#   scripts/ensure-go-tool.sh promtool   # Prometheus's rule checker, for the chart's alerts (docs/alerts.md)
#   scripts/ensure-go-tool.sh crane      # go-containerregistry's image tool, for the operator's image (scripts/build-image.sh)
#
# Each has a module of its own, not tests/kube: Prometheus pins its own
# client-go, and neither may move the Kubernetes build's versions.
# promtool is built with -tags remove_all_sd: its rule commands need no
# service discovery, and the cloud SDKs it would link dominate the build.
#
# ETCD_STEWARD_<TOOL> (ETCD_STEWARD_PROMTOOL, ETCD_STEWARD_CRANE) points it
# at a build you already have.
set -euo pipefail
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
tool=${1:?usage: ensure-go-tool.sh promtool|crane}
say() { echo "ensure-go-tool: $*" >&2; }

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
  *) say "unknown tool $tool (promtool or crane)"; exit 2 ;;
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
if [ -x "$out/$tool" ]; then
  echo "$out/$tool"; exit 0
fi
version=$(sed -n "s#^\s*$module \(v[^ ]*\).*\$#\1#p" go.mod | head -n1)
say "building $tool $version from tests/$tool into $out"
tmp="$out.part.$$"; trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp"
export CGO_ENABLED=0
go build -trimpath -tags "$tags" -ldflags "-s -w -X $stamp=${version#v}" -o "$tmp/$tool" "$package"
rm -rf "$out"; mv "$tmp" "$out"
echo "$out/$tool"
