#!/usr/bin/env bash
# Instructions per evaluation of the default policy, through wasm and native:
# the repeatable counterpart of the policy_eval bench's timings.
#
#   scripts/count-policy-eval.sh [calls]    (default 200)
#
# callgrind counts only inside the two entry points (--toggle-collect), so
# engine start-up and Cranelift compilation are left out. Each path also runs
# once more than `calls`, for the bench's agreement check, and that first
# (cold) call is included in the average.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/etcd-steward/target}"

calls="${1:-200}"
bench=$(cargo bench -p etcd-steward --bench policy_eval --no-run --quiet --message-format=json \
    | jq -r 'select(.reason == "compiler-artifact" and .target.name == "policy_eval") | .executable')
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

count() {
    local name=$1 entry=$2
    POLICY_EVAL_CALLS="$calls" valgrind --tool=callgrind --collect-atstart=no \
        --toggle-collect="$entry" --callgrind-out-file="$out/$name" "$bench" >/dev/null 2>&1
    local total
    total=$(callgrind_annotate "$out/$name" | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')
    printf '%7s: %9d instructions per evaluation (%d calls)\n' \
        "$name" $((total / (calls + 1))) $((calls + 1))
    echo "$total" >"$out/$name.total"
}

count wasm 'etcd_steward::policy::loaded::LoadedPolicy::evaluate'
count native 'steward_default_policy::logic::evaluate_json_settings'
echo "  ratio: $(awk -v w="$(cat "$out/wasm.total")" -v n="$(cat "$out/native.total")" \
    'BEGIN { printf "%.1fx", w / n }') (instructions, wasm / native)"
