#!/usr/bin/env bash
# Installs what the build and the tests need, once; cheap when all is present.
# Called by the Makefile before every build, so a fresh clone needs no manual step.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "prereqs: $*" >&2; }

# 1. The pinned toolchain with the wasm32-wasip2 target (rust-toolchain.toml).
#    rustup installs the file's targets only when it installs the toolchain,
#    so an already-present toolchain without the target needs this call.
if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
  say "installing the toolchain and targets from rust-toolchain.toml"
  rustup toolchain install
fi

# 2. protoc, for etcd-client's generated gRPC code.
if [ -z "${PROTOC:-}" ] && ! command -v protoc >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing protobuf-compiler"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq protobuf-compiler >/dev/null
  else
    say "protoc is missing: install protobuf-compiler (or set PROTOC) and re-run"
    exit 1
  fi
fi

# 3. The etcd releases (etcd, etcdctl, etcdutl of each supported minor),
#    built from the go.etcd.io/etcd modules tests/etcd pins, for the local
#    kubelet and the end-to-end tests.
scripts/ensure-etcd.sh >/dev/null

# 4. The real Kubernetes control plane, kubectl and helm, built from
#    tests/kube's Go module into the cache (the first build takes minutes
#    and says so).
command -v go >/dev/null 2>&1 || [ -n "${KUBE_BIN_DIR:-}" ] || {
  say "go is required to build the Kubernetes binaries (or set KUBE_BIN_DIR to existing ones)"; exit 1; }
scripts/ensure-kube.sh >/dev/null

# 5. The policy SDKs' pinned build tools (componentize-py from PyPI into a
#    venv, componentize-js from npm), into the cache: the tests that build
#    the SDKs' examples and scaffolds run in a namespace without DNS.
policies/python/build.sh --tools
policies/js/build.sh --tools
