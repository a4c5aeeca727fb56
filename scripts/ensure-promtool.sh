#!/usr/bin/env bash
# Prints the path of `promtool`, Prometheus's own rule checker, built from
# the github.com/prometheus/prometheus module that tests/promtool/go.mod
# pins, once, into the cache, keyed by a hash of that module and this
# script. The tests run `promtool check rules` and `promtool test rules` on
# the chart's alerts (docs/alerts.md).
#
# A module of its own, not tests/kube: Prometheus pins its own versions of
# client-go and friends, which must not move the Kubernetes build's.
# Built with -tags remove_all_sd: promtool's rule commands need no service
# discovery, and the cloud SDKs it would link triple the build.
#
# ETCD_STEWARD_PROMTOOL points it at a promtool you already have.
set -euo pipefail
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$0")/../tests/promtool"

if [ -n "${ETCD_STEWARD_PROMTOOL:-}" ]; then
  [ -x "$ETCD_STEWARD_PROMTOOL" ] || { echo "ensure-promtool: ETCD_STEWARD_PROMTOOL=$ETCD_STEWARD_PROMTOOL is not executable" >&2; exit 1; }
  echo "$ETCD_STEWARD_PROMTOOL"; exit 0
fi

key=$(cat go.mod go.sum "$self" | sha256sum | cut -c1-16)
root="${ETCD_STEWARD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/etcd-steward}"
out="$root/promtool-$key"
if [ -x "$out/promtool" ]; then
  echo "$out/promtool"; exit 0
fi
version=$(sed -n 's#^\s*github.com/prometheus/prometheus \(v[^ ]*\).*$#\1#p' go.mod | head -n1)
echo "ensure-promtool: building promtool $version from tests/promtool into $out" >&2
tmp="$out.part.$$"; trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp"
export CGO_ENABLED=0
go build -trimpath -tags remove_all_sd \
  -ldflags "-s -w -X github.com/prometheus/common/version.Version=${version#v}" \
  -o "$tmp/promtool" github.com/prometheus/prometheus/cmd/promtool
rm -rf "$out"; mv "$tmp" "$out"
"$out/promtool" --version | head -n1 >&2
echo "$out/promtool"
