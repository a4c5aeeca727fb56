#!/usr/bin/env bash
# Measures the operator at rest (docs/benchmarks.md, "Quiet at rest"): N
# one-member clusters on the sandbox's real control plane, all Available
# and settled, then for WINDOW seconds: EtcdCluster writes (a watch on
# them), the apiserver's resourceVersion, the apiserver's write requests by
# resource (its apiserver_request_total), and the operator's CPU time.
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
# Every write request the apiserver served, by resource and verb: who
# moves the resourceVersion (each resource has known writers).
requests() { kubectl get --raw /metrics | grep '^apiserver_request_total{' >"$1"; }
requests "$dir/requests0"
kubectl get events -A -o json >"$dir/events0.json"
rv0=$(rv); cpu0=$(cpu)
sleep "$WINDOW"
rv1=$(rv); cpu1=$(cpu)
requests "$dir/requests1"
kubectl get events -A -o json >"$dir/events1.json"
kill "$watch" 2>/dev/null || true
writes=$(wc -l <"$dir/writes")

python3 - "$N" "$WINDOW" "$writes" "$rv0" "$rv1" "$cpu0" "$cpu1" "$ticks" "$dir/requests0" "$dir/requests1" "$dir/events0.json" "$dir/events1.json" <<'PY'
import json, re, sys
from collections import Counter
n, window, writes, rv0, rv1, cpu0, cpu1, ticks = (float(x) for x in sys.argv[1:9])

def writes_by_resource(path):
    out = Counter()
    for line in open(path):
        labels, value = line.rsplit(" ", 1)
        l = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if l.get("verb") in ("POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION") \
                and l.get("code", "").startswith("2"):
            res = l["resource"] + ("/" + l["subresource"] if l.get("subresource") else "")
            out[(res, l["verb"])] += float(value)
    return out

before, after = writes_by_resource(sys.argv[9]), writes_by_resource(sys.argv[10])
served = Counter({k: after[k] - before.get(k, 0) for k in after if after[k] - before.get(k, 0) > 0})
print(f"apiserver writes in the window: {sum(served.values()):.0f}, by resource:")
for (res, verb), count in served.most_common():
    print(f"  {res:<32} {verb:<7} {count:6.0f} = {count / window:6.2f} per s")
# An Event said again is a PATCH of its count: who said what how often
# in the window (the rise of each Event's count, new Events included).
def counts(path):
    out = {}
    for e in json.load(open(path))["items"]:
        source = e.get("reportingComponent") or (e.get("source") or {}).get("component", "")
        # Old-style recorders count in `count`, events.k8s.io ones in `series`.
        count = max(e.get("count") or 0, (e.get("series") or {}).get("count") or 0, 1)
        out[e["metadata"]["uid"]] = (source, e.get("reason", ""), count)
    return out
e0, e1 = counts(sys.argv[11]), counts(sys.argv[12])
said = Counter()
for uid, (source, reason, count) in e1.items():
    said[(source, reason)] += count - (e0.get(uid, (None, None, 0))[2])
print("Events said in the window, by source and reason:")
for (source, reason), count in said.most_common():
    if count > 0:
        print(f"  {source:<28} {reason:<28} {count:6} = {count / window:6.2f} per s")

cpu = (cpu1 - cpu0) / ticks / window  # cores
print(f"clusters {n:.0f}, window {window:.0f} s")
print(f"EtcdCluster writes: {writes:.0f} = {writes / n / (window / 15):.2f} per cluster per 15 s")
print(f"apiserver resourceVersion: +{rv1 - rv0:.0f} = {(rv1 - rv0) / n / window:.3f} per cluster per s (all writers)")
print(f"operator CPU: {cpu * 100:.2f} % of a core = {cpu * 100 / n:.3f} % per cluster; "
      f"1000 clusters -> {cpu * 1000 / n:.2f} cores")
PY
