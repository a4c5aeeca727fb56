#!/usr/bin/env bash
# Runs a command in a private mount namespace whose /etc/hosts and
# /etc/resolv.conf are private copies, so the testbed's local kubelet can
# publish Pod names (<pod>.<svc>.<ns>.svc) without touching the machine's
# real files; and in a network namespace of its own, whose loopback holds
# local routes for the Pod network (10.244.0.0/16) and the Service network
# (10.96.0.0/16), so Pods get addresses the API server accepts in
# Endpoints and the testbed's Service proxy can listen on ClusterIPs, while
# no packet can leave the namespace (it has no other interface). See
# docs/local-kubelet.md.
#
#   scripts/in-namespace.sh cargo test -p steward-testbed
#   scripts/in-namespace.sh --host-network CMD   # the machine's network, loopback Pod IPs
#
# --host-network leaves out the network namespace, as for a sandbox that
# kubectl in another shell must reach (Pods then get loopback addresses,
# which Services' endpoints refuse, and there is no Service proxy).
#
# Nothing inside reaches the network outside, not even the machine's own
# loopback: build first (cargo, Go, npm and pip caches), then run tests here.
#
# As root: `unshare -mn`. Otherwise: `unshare -rmn` (a user namespace in
# which you appear as root; see the docs for what that changes).
set -euo pipefail
marker=ETCD_STEWARD_PRIVATE_HOSTS
pod_network=10.244.0.0/16
# The test control plane's --service-cluster-ip-range (tests/testbed).
service_network=10.96.0.0/16

if [ "${1:-}" = "--inside" ]; then
  dir=$2; net=$3; shift 3
  cp /etc/hosts "$dir/hosts"
  printf 'nameserver 127.0.0.1\noptions timeout:1 attempts:1\n' > "$dir/resolv.conf"
  mount --bind "$dir/hosts" /etc/hosts
  mount --bind "$dir/resolv.conf" /etc/resolv.conf
  export "$marker=$dir/hosts"
  [ "$net" = private ] || exec "$@"
  ip link set lo up
  # Type local: every address of the range is this namespace's own, as
  # 127.0.0.0/8 is, without an address per Pod.
  ip route add local "$pod_network" dev lo
  ip route add local "$service_network" dev lo
  export ETCD_STEWARD_POD_NETWORK="$pod_network"
  export ETCD_STEWARD_SERVICE_NETWORK="$service_network"
  exec "$@"
fi

net=private
if [ "${1:-}" = "--host-network" ]; then net=host; shift; fi
if [ $# -eq 0 ]; then
  echo "usage: $0 [--host-network] COMMAND [ARGS...]" >&2
  exit 2
fi
if ! command -v unshare >/dev/null 2>&1; then
  echo "in-namespace: unshare (util-linux) is required" >&2
  exit 1
fi
if ! command -v ip >/dev/null 2>&1; then
  echo "in-namespace: ip (iproute2) is required" >&2
  exit 1
fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/etcd-steward-ns.XXXXXX")
# The private files are deleted once the command is done; the namespace
# (and its mounts) vanish with its last process.
trap 'rm -rf "$dir"' EXIT
ns=(--mount)
if [ "$net" = private ]; then ns+=(--net); fi
if [ "$(id -u)" = 0 ]; then
  unshare "${ns[@]}" --propagation private "$0" --inside "$dir" "$net" "$@"
else
  if ! unshare --user --map-root-user "${ns[@]}" --propagation private true 2>/dev/null; then
    echo "in-namespace: cannot create a user+mount(+network) namespace as $(id -un);" \
         "enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1" \
         "or kernel.apparmor_restrict_unprivileged_userns=0) or run as root" >&2
    exit 1
  fi
  unshare --user --map-root-user "${ns[@]}" --propagation private "$0" --inside "$dir" "$net" "$@"
fi
