#!/usr/bin/env bash
# Prints the directory holding the real Kubernetes binaries the tests and the
# sandbox run: kube-apiserver, kube-controller-manager, kube-scheduler and
# kubectl (one multi-call binary, `kube`, with a symlink per name), etcd (the
# release k8s.io/kubernetes pins), helm, and steward-status (kstatus and
# Argo CD's Lua health checks, for reading statuses as Flux and Argo do;
# tests/kube/cmd/status), and, for policies shipped as OCI artifacts, the
# CNCF distribution `registry` and the `oras` client (tests/testbed's
# registry.rs runs them). Built once from tests/kube's Go
# module into the cache, keyed by a hash of that module (go.mod, go.sum and
# its sources, and this script), so a fresh clone with the same module reuses them.
# KUBE_BIN_DIR points it at binaries you already have instead (a distro's or
# envtest's); it must hold at least the three control-plane binaries and kubectl
# (the tests that read statuses also need steward-status there).
set -euo pipefail
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$0")/../tests/kube"

need=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
if [ -n "${KUBE_BIN_DIR:-}" ]; then
  for b in "${need[@]}"; do
    [ -x "$KUBE_BIN_DIR/$b" ] || { echo "ensure-kube: KUBE_BIN_DIR=$KUBE_BIN_DIR has no executable $b" >&2; exit 1; }
  done
  echo "$KUBE_BIN_DIR"; exit 0
fi

key=$(cat go.mod go.sum $(find cmd -name '*.go' | sort) "$self" | sha256sum | cut -c1-16)
root="${ETCD_STEWARD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/etcd-steward}"
out="$root/kube-$key"
if [ -x "$out/kube" ] && [ -x "$out/etcd" ] && [ -x "$out/helm" ] && [ -x "$out/steward-status" ] \
  && [ -x "$out/registry" ] && [ -x "$out/oras" ] && [ -x "$out/cert-manager" ] \
  && [ -d "$out/cert-manager-crds" ]; then
  echo "$out"; exit 0
fi

# The Kubernetes build sets its version through these; without them the
# binaries call themselves v0.0.0-master and kubectl warns about skew.
kver=$(sed -n 's#^\s*k8s.io/kubernetes v\(.*\)$#\1#p' go.mod | head -n1)
major=${kver%%.*}; rest=${kver#*.}; minor=${rest%%.*}
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=v$kver -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor \
  -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"

tmp="$out.part.$$"; trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp"
say() { echo "ensure-kube: $*" >&2; }
say "building Kubernetes v$kver (kube-apiserver, kube-controller-manager, kube-scheduler, kubectl), etcd, helm, steward-status, registry, oras and cert-manager from tests/kube into $out"
say "the first build compiles Kubernetes from source and takes about 11 minutes on 2 cores (docs/benchmarks.md); later runs reuse it"
export CGO_ENABLED=0
go build -trimpath -ldflags "$ldflags" -o "$tmp/kube" ./cmd/kube
go build -trimpath -ldflags "-s -w" -o "$tmp/etcd" ./cmd/etcd
go build -trimpath -ldflags "-s -w" -o "$tmp/steward-status" ./cmd/status
hver=$(sed -n 's#^\s*helm.sh/helm/v4 \(v[^ ]*\).*$#\1#p' go.mod | head -n1)
go build -trimpath -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$hver" -o "$tmp/helm" helm.sh/helm/v4/cmd/helm
rver=$(sed -n 's#^\s*github.com/distribution/distribution/v3 \(v[^ ]*\).*$#\1#p' go.mod | head -n1)
go build -trimpath -ldflags "-s -w -X github.com/distribution/distribution/v3/version.version=$rver" -o "$tmp/registry" ./cmd/registry
go build -trimpath -ldflags "-s -w" -o "$tmp/oras" oras.land/oras/cmd/oras
go build -trimpath -ldflags "-s -w" -o "$tmp/cert-manager" ./cmd/certmanager
# Its CRDs, as its module ships them (v1 only, so no conversion webhook).
mkdir "$tmp/cert-manager-crds"
cp "$(go list -m -f '{{.Dir}}' github.com/cert-manager/cert-manager)"/deploy/crds/*.yaml "$tmp/cert-manager-crds/"
for b in "${need[@]}"; do ln -s kube "$tmp/$b"; done
rm -rf "$out"; mv "$tmp" "$out"
"$out/kube-apiserver" --version >&2
echo "$out"
