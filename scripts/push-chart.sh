#!/usr/bin/env bash
# Packages the Helm chart (deploy/helm/etcd-steward) and pushes it to an OCI
# registry with helm, as `oci://REGISTRY/charts/etcd-steward`.
#
#   scripts/push-chart.sh REGISTRY        # `make chart REGISTRY=...`
#
# The chart's version and appVersion are the release's (Chart.yaml; a test
# checks that they equal Cargo.toml's version and the image tag), so
# `helm install oci://REGISTRY/charts/etcd-steward --version VERSION` runs
# the image REGISTRY/etcd-steward:VERSION with `--set
# image.repository=REGISTRY/etcd-steward`.
#
# HELM=path picks the helm (default: the one scripts/ensure-kube.sh builds).
# PLAIN_HTTP=1 talks plain HTTP to the registry. Credentials: `helm
# registry login`. Prints the chart's reference with its digest.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
say() { echo "push-chart: $*" >&2; }
registry=${1:?usage: push-chart.sh REGISTRY}
helm=${HELM:-$("$repo/scripts/ensure-kube.sh")/helm}
chart="$repo/deploy/helm/etcd-steward"
version=$(sed -n 's/^version: *//p' "$chart/Chart.yaml" | head -n1)
# CHART_VERSION=V packages this tree as version and appVersion V instead
# (the upgrade test's stand-in for a previous release).
package_flags=()
if [ -n "${CHART_VERSION:-}" ]; then
  version=$CHART_VERSION
  package_flags=(--version "$version" --app-version "$version")
fi
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
"$helm" lint "$chart" >&2
"$helm" package "$chart" "${package_flags[@]}" --destination "$work" >&2
flags=()
[ "${PLAIN_HTTP:-}" = 1 ] && flags+=(--plain-http)
"$helm" push "$work/etcd-steward-$version.tgz" "oci://$registry/charts" "${flags[@]}" >"$work/push.log" 2>&1 \
  || { cat "$work/push.log" >&2; say "helm push to oci://$registry/charts failed"; exit 1; }
cat "$work/push.log" >&2
digest=$(sed -n 's/^Digest: *//p' "$work/push.log" | head -n1)
[ -n "$digest" ] || { say "helm push printed no digest"; exit 1; }
echo "oci://$registry/charts/etcd-steward:$version@$digest"
