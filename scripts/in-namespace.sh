#!/usr/bin/env bash
# Runs a command in a private mount namespace whose /etc/hosts and
# /etc/resolv.conf are private copies, so the testbed's local kubelet can
# publish Pod names (<pod>.<svc>.<ns>.svc) without touching the machine's
# real files. See docs/local-kubelet.md.
#
#   scripts/in-namespace.sh cargo test -p steward-testbed
#
# As root: `unshare -m`. Otherwise: `unshare -rm` (a user namespace in which
# you appear as root; see the docs for what that changes).
set -euo pipefail
marker=ETCD_STEWARD_PRIVATE_HOSTS

if [ "${1:-}" = "--inside" ]; then
  dir=$2; shift 2
  cp /etc/hosts "$dir/hosts"
  printf 'nameserver 127.0.0.1\noptions timeout:1 attempts:1\n' > "$dir/resolv.conf"
  mount --bind "$dir/hosts" /etc/hosts
  mount --bind "$dir/resolv.conf" /etc/resolv.conf
  export "$marker=$dir/hosts"
  exec "$@"
fi

if [ $# -eq 0 ]; then
  echo "usage: $0 COMMAND [ARGS...]" >&2
  exit 2
fi
if ! command -v unshare >/dev/null 2>&1; then
  echo "in-namespace: unshare (util-linux) is required" >&2
  exit 1
fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/etcd-steward-ns.XXXXXX")
# The private files are deleted once the command is done; the namespace
# (and its mounts) vanish with its last process.
trap 'rm -rf "$dir"' EXIT
if [ "$(id -u)" = 0 ]; then
  unshare --mount --propagation private "$0" --inside "$dir" "$@"
else
  if ! unshare --user --map-root-user --mount --propagation private true 2>/dev/null; then
    echo "in-namespace: cannot create a user+mount namespace as $(id -un);" \
         "enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1" \
         "or kernel.apparmor_restrict_unprivileged_userns=0) or run as root" >&2
    exit 1
  fi
  unshare --user --map-root-user --mount --propagation private "$0" --inside "$dir" "$@"
fi
