#!/usr/bin/env bash
# Builds the operator's OCI image from this tree and the build machine's
# CA bundle, and pushes it; no base image is pulled (there is none: the
# image is one layer on an empty base, assembled with crane from
# go-containerregistry).
#
#   scripts/build-image.sh REGISTRY/REPOSITORY:TAG     # `make image REGISTRY=...`
#
# Prints the pushed image as REGISTRY/REPOSITORY@sha256:DIGEST.
#
# The layer holds:
#   /usr/local/bin/etcd-steward   the release binary, statically linked (musl),
#                                 without the sandbox feature
#   /etc/ssl/certs/ca-certificates.crt   the build machine's, from Debian's ca-certificates
#                                 package (its version is a label)
#   /etc/passwd, /etc/group       root and nonroot (65532), the image's user
#   /tmp (1777), /home/nonroot
# The config: entrypoint the binary, cmd `run`, user 65532:65532, and the
# OCI labels source, revision (the commit), version, licenses.
#
# Reproducible: the layer's tar has sorted entries, zero mtimes and fixed
# owners, and crane's gzip and config carry no time; two builds with the
# same binary and CA bundle give one digest (host/tests/image.rs checks it
# on one machine). Across machines, the release binary must come out the
# same from cargo, and the CA package must be the same version.
#
# BIN=path ships that binary instead of building the release one (the tests
# ship their own build). INSECURE=1 talks plain HTTP to the registry.
# Registry credentials: crane reads ~/.docker/config.json (`crane auth login`).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
say() { echo "build-image: $*" >&2; }
ref=${1:?usage: build-image.sh REGISTRY/REPOSITORY:TAG}
# The tag is after the last path component's colon (a registry's port is not one).
case "${ref##*/}" in *:*) ;; *) say "$ref has no tag"; exit 2 ;; esac
tag=${ref##*:}
repository=${ref%:"$tag"}

# The workspace's version and repository (Cargo.toml), as the binary has them.
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$repo/Cargo.toml" | head -n1)
source=$(sed -n 's/^repository = "\(.*\)"$/\1/p' "$repo/Cargo.toml" | head -n1)
revision=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)

crane=$("$repo/scripts/ensure-go-tool.sh" crane)
bin=${BIN:-}
if [ -z "$bin" ]; then
  target=x86_64-unknown-linux-musl
  rustup target list --installed | grep -qx "$target" || rustup target add "$target" >&2
  # ring's C code needs a musl C compiler.
  if ! command -v musl-gcc >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      say "installing musl-tools"
      apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq musl-tools >/dev/null
    else
      say "musl-gcc is missing: install musl-tools and re-run"; exit 1
    fi
  fi
  say "building the release binary for $target"
  (cd "$repo" && cargo build --release --locked -p etcd-steward --target "$target" >&2)
  bin="${CARGO_TARGET_DIR:-$repo/target}/$target/release/etcd-steward"
fi
[ -x "$bin" ] || { say "$bin is not an executable"; exit 1; }
certs=/etc/ssl/certs/ca-certificates.crt
[ -s "$certs" ] || { say "$certs is missing: apt-get install ca-certificates"; exit 1; }
certs_version=$(dpkg-query -W -f '${Version}' ca-certificates 2>/dev/null || echo unknown)

work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
python3 - "$work/layer.tar" "$bin" "$certs" <<'PY'
import io, sys, tarfile
out, binary, certs = sys.argv[1:]
entries = []  # (path, type, mode, uid, data)
def d(path, mode, uid=0): entries.append((path, tarfile.DIRTYPE, mode, uid, None))
def f(path, mode, data): entries.append((path, tarfile.REGTYPE, mode, 0, data))
for p in ["etc", "etc/ssl", "etc/ssl/certs", "home", "usr", "usr/local", "usr/local/bin"]:
    d(p, 0o755)
d("home/nonroot", 0o700, 65532)
d("tmp", 0o1777)
f("etc/passwd", 0o644, b"root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")
f("etc/group", 0o644, b"root:x:0:\nnonroot:x:65532:\n")
f("etc/ssl/certs/ca-certificates.crt", 0o644, open(certs, "rb").read())
f("usr/local/bin/etcd-steward", 0o755, open(binary, "rb").read())
with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as t:
    for path, kind, mode, uid, data in sorted(entries):
        i = tarfile.TarInfo(path)
        i.type, i.mode, i.uid, i.gid, i.mtime = kind, mode, uid, uid, 0
        i.uname = i.gname = ""
        if data is not None:
            i.size = len(data)
        t.addfile(i, io.BytesIO(data) if data is not None else None)
PY

flags=()
[ "${INSECURE:-}" = 1 ] && flags+=(--insecure)
say "pushing $ref"
# crane logs every blob to stderr: kept per command, shown only if it fails.
log="$work/crane.log"
crane() {
  "$crane" "$@" 2>"$log" && return
  cat "$log" >&2
  if grep -q "401 Unauthorized\|UNAUTHORIZED" "$log"; then
    say "crane $1 failed: the registry refused the credentials (or none were given); log in with \`crane auth login ${ref%%/*}\`"
  else
    say "crane $1 failed"
  fi
  exit 1
}
crane append "${flags[@]}" --oci-empty-base -f "$work/layer.tar" -t "$ref" >/dev/null
crane mutate "${flags[@]}" "$ref" -t "$ref" \
  --set-platform linux/amd64 \
  --entrypoint /usr/local/bin/etcd-steward --cmd run \
  --user 65532:65532 \
  --env PATH=/usr/local/bin:/usr/bin:/bin \
  --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
  -l org.opencontainers.image.source="$source" \
  -l org.opencontainers.image.revision="$revision" \
  -l org.opencontainers.image.version="$version" \
  -l org.opencontainers.image.licenses=Apache-2.0 \
  -l org.opencontainers.image.title=etcd-steward \
  -l dev.steward.ca-certificates="$certs_version" >/dev/null
digest=$(crane digest "${flags[@]}" "$ref")
size=$(crane manifest "${flags[@]}" "$ref" | python3 -c 'import json,sys; m=json.load(sys.stdin); print(sum(l["size"] for l in m["layers"]) + m["config"]["size"])')
[ "$tag" = "$version" ] || say "note: tag $tag is not the release's version $version"
say "$ref is $digest, $size bytes compressed (binary $(stat -c %s "$bin") bytes)"
echo "$repository@$digest"
