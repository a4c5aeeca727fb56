#!/usr/bin/env bash
# Measures the operator at rest (docs/benchmarks.md, "Quiet at rest"): N
# one-member clusters on the sandbox's real control plane, all Available
# and settled, then for WINDOW seconds. It reports:
#
# - the apiserver's write requests in the window, by resource and verb
#   (the rise of its apiserver_request_total, successful write verbs);
# - the Events said in the window, by source and reason;
# - EtcdCluster writes (a `kubectl --watch-only` on them), per cluster per
#   15 s;
# - the apiserver's resourceVersion rise (every writer's);
# - the operator's CPU time (/proc/PID/stat), in % of a core;
# - the operator's RSS at the end of the window: VmRSS and VmHWM (its
#   peak) from /proc/PID/status;
# - the watch connections the operator holds open, by resource and scope:
#   the apiserver's apiserver_longrunning_requests{verb="WATCH"} gauge with
#   the operator running, minus the same gauge just before it started (the
#   controller-manager, the scheduler and the testbed's kubelet watch too;
#   the gauge is first left to settle after the CRDs are applied, as the
#   garbage collector and the quota controller start watches on new CRDs).
#   Read at the start and at the end of the window (the script's own
#   kubectl watch not running), and once more after the operator is
#   stopped, which should give the "before" gauge back. The count should
#   not depend on N.
#
#   N=30 WINDOW=60 scripts/measure-at-rest.sh
#   N=30 WINDOW=60 BIN=/tmp/etcd-steward-before scripts/measure-at-rest.sh
#
# Builds `etcd-steward` with the release profile (PROFILE=dev for a debug
# build), or measures a prebuilt binary given as BIN (built with the
# `sandbox` feature; nothing is built then). Needs what `make
# sandbox` needs (scripts/prereqs.sh runs first).
set -euo pipefail
BIN=${BIN:-}
if [ -n "$BIN" ]; then BIN=$(realpath -e "$BIN"); fi
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
if [ -n "$BIN" ]; then
  bin=$BIN
else
  cargo build --profile "$PROFILE" -p etcd-steward --features sandbox >&2
  case "$PROFILE" in dev) out=debug ;; *) out=$PROFILE ;; esac
  bin="$CARGO_TARGET_DIR/$out/etcd-steward"
fi
echo "binary: $bin ($(stat -c '%s bytes, modified %y' "$bin"); sha256 $(sha256sum "$bin" | cut -c1-16))"

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
kubectl wait --for=condition=Established crd --all --timeout=60s >/dev/null

# Every watch the apiserver serves now, by verb="WATCH" (a watch-list is
# counted as a WATCH too), group, version, resource, subresource, scope.
watches() {
  kubectl get --raw /metrics >"$1.metrics"
  { grep '^apiserver_longrunning_requests{' "$1.metrics" || true; } | { grep 'verb="WATCH"' || true; } >"$1"
}
# The others' watches, settled: the garbage collector and the quota
# controller rediscover resources every 30 s and then watch the new CRDs.
say "waiting for the control plane's own watches to settle"
watches "$dir/watches-prev"
stable=0
for i in $(seq 60); do
  sleep 5
  watches "$dir/watches0"
  if cmp -s "$dir/watches0" "$dir/watches-prev"; then stable=$((stable + 5)); else stable=0; fi
  cp "$dir/watches0" "$dir/watches-prev"
  if [ "$stable" -ge 35 ] && [ "$i" -ge 8 ]; then break; fi
done
[ "$stable" -ge 35 ] || say "the control plane's watches did not settle in 300 s; the watch count may be off"

# The operator joins the sandbox's mount namespace, where Pod names resolve.
nsenter -t "$sandbox" -m -- env KUBECONFIG="$KUBECONFIG" RUST_LOG=warn \
  "$bin" run --metrics-addr= >"$dir/operator.log" 2>&1 &
operator=$!
pids+=("$operator")
sleep 1
# nsenter and env exec, so the PID is the operator's own (CPU, RSS).
[ "$(readlink "/proc/$operator/exe" 2>/dev/null)" = "$(realpath "$bin")" ] ||
  say "PID $operator runs $(readlink "/proc/$operator/exe" 2>/dev/null || echo nothing), not $bin"

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
# The operator's watches, before the script's own watch below starts.
watches "$dir/watches1"
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
# kB; VmHWM is the peak RSS since the operator started.
rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$operator/status")
hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$operator/status")
requests "$dir/requests1"
kubectl get events -A -o json >"$dir/events1.json"
kill "$watch" 2>/dev/null || true
wait "$watch" 2>/dev/null || true
writes=$(wc -l <"$dir/writes")
sleep 1
watches "$dir/watches2"
# The operator stopped, the gauge should be back to the one before it.
kill "$operator" 2>/dev/null || true
for _ in $(seq 100); do kill -0 "$operator" 2>/dev/null || break; sleep 0.2; done
if kill -0 "$operator" 2>/dev/null; then say "the operator did not stop in 20 s of SIGTERM"; fi
sleep 2
watches "$dir/watches3"

python3 - "$N" "$WINDOW" "$writes" "$rv0" "$rv1" "$cpu0" "$cpu1" "$ticks" "$dir/requests0" "$dir/requests1" "$dir/events0.json" "$dir/events1.json" \
  "$rss" "$hwm" "$dir/watches0" "$dir/watches1" "$dir/watches2" "$dir/watches3" <<'PY'
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
rss, hwm = float(sys.argv[13]), float(sys.argv[14])
print(f"operator RSS at the end of the window: VmRSS {rss:.0f} kB = {rss / 1024:.1f} MiB, "
      f"VmHWM (peak) {hwm:.0f} kB = {hwm / 1024:.1f} MiB")

# apiserver_longrunning_requests{verb="WATCH"}: open watches by resource.
def watches(path):
    out = Counter()
    for line in open(path):
        labels, value = line.rsplit(" ", 1)
        l = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        res = l.get("resource", "") + ("/" + l["subresource"] if l.get("subresource") else "")
        if l.get("group"):
            res += "." + l["group"]
        out[(res, l.get("scope", ""))] += float(value)
    return out
base, start, end, stopped = (watches(p) for p in sys.argv[15:19])
keys = sorted(set(base) | set(start) | set(end) | set(stopped))
ops = {k: (start[k] - base[k], end[k] - base[k]) for k in keys}
print("operator watches (apiserver_longrunning_requests{verb=\"WATCH\"} with the operator "
      "running, minus the same just before it started), by resource and scope:")
print(f"  {'resource':<40} {'scope':<10} {'start':>6} {'end':>6}")
for k in sorted(keys, key=lambda k: (-ops[k][0], k)):
    if ops[k] != (0, 0):
        print(f"  {k[0]:<40} {k[1]:<10} {ops[k][0]:6.0f} {ops[k][1]:6.0f}")
total = lambda c: sum(c.values())
print(f"  {'total':<51} {total(start) - total(base):6.0f} {total(end) - total(base):6.0f}")
kinds = len({k[0] for k in keys if ops[k][0] > 0})
print(f"operator watches: {total(start) - total(base):.0f} on {kinds} resources "
      f"(others' watches: {total(base):.0f} before the operator started, "
      f"{total(stopped):.0f} after it stopped)")
if stopped != base:
    print("  note: the others' watches moved while the operator ran:")
    for k in keys:
        if stopped[k] != base[k]:
            print(f"    {k[0]:<40} {k[1]:<10} before {base[k]:.0f}, after {stopped[k]:.0f}")
PY
