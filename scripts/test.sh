#!/usr/bin/env bash
# The project's test command (`make test`): formatting, lints, the JS SDK's
# unit tests, then every test of the workspace inside a private mount and
# network namespace (the local kubelet publishes Pod names in a private
# /etc/hosts there, and Pods get addresses from 10.244.0.0/16) with real etcd binaries and the real Kubernetes control plane
# (scripts/ensure-kube.sh). The Python and JavaScript SDK examples and
# scaffolds are built by the tests with each SDK's build.sh, which installs
# its pinned tools (componentize-py from PyPI, componentize-js from npm).
# A missing prerequisite fails the run with a message; nothing is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "test.sh: $*" >&2; }

for tool in cargo unshare python3 node npm; do
  command -v "$tool" >/dev/null 2>&1 || { say "$tool is required but not installed"; exit 1; }
done

# SeaweedFS (the backup tests' S3 server) takes about 7 minutes to build
# cold, much of it one single-threaded link: started first, it overlaps the
# lints instead of adding to them. A warm cache returns at once.
seaweedfs_out=$(mktemp); seaweedfs_err=$(mktemp)
scripts/ensure-go-tool.sh seaweedfs >"$seaweedfs_out" 2>"$seaweedfs_err" &
seaweedfs_pid=$!
trap 'kill "$seaweedfs_pid" 2>/dev/null || true; rm -f "$seaweedfs_out" "$seaweedfs_err"' EXIT

say "cargo fmt --check"
cargo fmt --all -- --check
say "cargo clippy"
# --all-features: the sandbox (off by default) is linted too.
cargo clippy --workspace --all-targets --all-features -- -D warnings

etcd_dir=$(scripts/ensure-etcd.sh) || { say "could not provision etcd (scripts/ensure-etcd.sh failed)"; exit 1; }
export ETCD_STEWARD_ETCD_DIR="$etcd_dir"
# The default release's etcdctl and etcdutl for tools that look on PATH.
export PATH="$etcd_dir/default:$PATH"
say "etcd releases in $etcd_dir: $(cd "$etcd_dir" && ls -d [0-9]* | tr '\n' ' ')(default $(readlink "$etcd_dir/default"))"

kube_dir=$(scripts/ensure-kube.sh) || { say "could not provision the Kubernetes binaries (scripts/ensure-kube.sh failed)"; exit 1; }
export ETCD_STEWARD_KUBE_DIR="$kube_dir"
# kubectl and helm from the same build, ahead of any older ones on PATH.
export PATH="$kube_dir:$PATH"
say "Kubernetes from $kube_dir: $("$kube_dir/kube-apiserver" --version)"

promtool=$(scripts/ensure-go-tool.sh promtool) || { say "could not provision promtool (scripts/ensure-go-tool.sh promtool failed)"; exit 1; }
export ETCD_STEWARD_PROMTOOL="$promtool"
say "$("$promtool" --version | head -n1)"
crane=$(scripts/ensure-go-tool.sh crane) || { say "could not provision crane (scripts/ensure-go-tool.sh crane failed)"; exit 1; }
export ETCD_STEWARD_CRANE="$crane"
# SeaweedFS's `weed`: the S3 server the backup tests upload to.
if ! wait "$seaweedfs_pid"; then
  cat "$seaweedfs_err" >&2
  say "could not provision SeaweedFS (scripts/ensure-go-tool.sh seaweedfs failed)"; exit 1
fi
cat "$seaweedfs_err" >&2
seaweedfs=$(cat "$seaweedfs_out")
export ETCD_STEWARD_SEAWEEDFS="$seaweedfs"
say "SeaweedFS: $("$seaweedfs" version 2>/dev/null | head -n1)"

say "the JavaScript SDK's unit tests"
policies/js/test.sh
say "the Python SDK's unit tests"
policies/python/test.sh

say "cargo test (in a private mount and network namespace)"
# Without the sandbox feature: the binary the in-cluster tests run is the
# one a cluster runs. The sandbox's own unit tests follow, with it.
scripts/in-namespace.sh cargo test --workspace --no-fail-fast "$@"
say "cargo test of the sandbox command (--features sandbox)"
cargo test -p etcd-steward --features sandbox --lib --no-fail-fast cli::sandbox
