#!/usr/bin/env bash
# Measures the operator at rest (docs/benchmarks.md, "Quiet at rest"): N
# one-member clusters on the sandbox's real control plane, all Available
# and settled, then for WINDOW seconds: EtcdCluster writes (a watch on
# them), the apiserver's resourceVersion, and the operator's CPU time.
#
#   N=30 WINDOW=60 scripts/measure-at-rest.sh
#
# Builds `etcd-steward` with the release profile (PROFILE=dev for a debug
# build). Needs what `make sandbox` needs (scripts/prereqs.sh runs first).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-30}
WINDOW=${WINDOW:-60}
PROFILE=${PROFILE:-release}
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/etcd-steward/target}"
say() { echo "measure-at-rest: $*" >&2; }

scripts/prereqs.sh
kube_dir=$(scripts/ensure-kube.sh)
export ETCD_STEWARD_KUBE_DIR="$kube_dir" PATH="$kube_dir:$PATH"
export ETCD_STEWARD_ETCD_DIR="$(scripts/ensure-etcd.sh)"
cargo build --profile "$PROFILE" -p etcd-steward >&2
case "$PROFILE" in dev) out=debug ;; *) out=$PROFILE ;; esac
bin="$CARGO_TARGET_DIR/$out/etcd-steward"

dir=$(mktemp -d /tmp/at-rest.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

"$bin" sandbox --control-plane-only --dir "$dir" >"$dir/sandbox.out" 2>"$dir/sandbox.err" &
sandbox=$!
pids+=("$sandbox")
for _ in $(seq 600); do grep -q nsenter "$dir/sandbox.out" 2>/dev/null && break; sleep 0.5; done
grep -q nsenter "$dir/sandbox.out" || { say "the sandbox did not start: $(tail -5 "$dir/sandbox.err")"; exit 1; }
export KUBECONFIG="$dir/kubeconfig"
kubectl apply -f crds/ >/dev/null

# The operator joins the sandbox's mount namespace, where Pod names resolve.
nsenter -t "$sandbox" -m -- env KUBECONFIG="$KUBECONFIG" RUST_LOG=warn \
  "$bin" run --metrics-addr= >"$dir/operator.log" 2>&1 &
operator=$!
pids+=("$operator")

for i in $(seq "$N"); do
  cat <<YAML
apiVersion: etcd.steward.dev/v1alpha1
kind: EtcdCluster
metadata: {name: rest-$i, namespace: default}
spec: {replicas: 1}
---
YAML
done | kubectl apply -f - >/dev/null
say "waiting for $N clusters to be Available and settled"
kubectl wait --for=condition=Available etcdcluster --all --timeout=900s >/dev/null
kubectl wait --for=condition=Reconciling=False etcdcluster --all --timeout=300s >/dev/null
sleep 20

ticks=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$operator/stat"; }
# A list's resourceVersion is the apiserver's current one (every writer's).
rv() { kubectl get --raw '/apis/etcd.steward.dev/v1alpha1/etcdclusters?limit=1' |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"]["resourceVersion"])'; }
kubectl get etcdclusters -A --watch-only -o name >"$dir/writes" 2>/dev/null &
watch=$!
pids+=("$watch")
sleep 2
rv0=$(rv); cpu0=$(cpu)
sleep "$WINDOW"
rv1=$(rv); cpu1=$(cpu)
kill "$watch" 2>/dev/null || true
writes=$(wc -l <"$dir/writes")

python3 - "$N" "$WINDOW" "$writes" "$rv0" "$rv1" "$cpu0" "$cpu1" "$ticks" <<'PY'
import sys
n, window, writes, rv0, rv1, cpu0, cpu1, ticks = (float(x) for x in sys.argv[1:])
cpu = (cpu1 - cpu0) / ticks / window  # cores
print(f"clusters {n:.0f}, window {window:.0f} s")
print(f"EtcdCluster writes: {writes:.0f} = {writes / n / (window / 15):.2f} per cluster per 15 s")
print(f"apiserver resourceVersion: +{rv1 - rv0:.0f} = {(rv1 - rv0) / n / window:.3f} per cluster per s (all writers)")
print(f"operator CPU: {cpu * 100:.2f} % of a core = {cpu * 100 / n:.3f} % per cluster; "
      f"1000 clusters -> {cpu * 1000 / n:.2f} cores")
PY
