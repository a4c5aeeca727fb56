# Sourced by build.sh and test.sh. Installs the tools package-lock.json pins
# (componentize-js, jco, yaml) once per lock file, outside the clone, and
# prints where their node_modules are.
#
# The directory is named after the lock's hash, so a changed lock installs
# afresh beside the old one and a clean checkout reuses what is there. The
# install happens in a temporary directory moved into place when complete,
# so an interrupted or concurrent install never leaves a half-filled cache.
steward_js_tools() {
  local here=$1 hash cache dir tmp
  hash=$(sha256sum "$here/package-lock.json" | cut -c1-16)
  cache=${ETCD_STEWARD_CACHE:-$HOME/.cache/etcd-steward}
  dir=$cache/node-$hash
  if [ ! -f "$dir/.complete" ]; then
    mkdir -p "$cache"
    tmp=$(mktemp -d "$dir.tmp.XXXXXX")
    chmod 755 "$tmp"
    cp "$here/package.json" "$here/package-lock.json" "$tmp/"
    # No package in the lock needs an install script; refusing them keeps an
    # install from fetching anything beyond the registry's tarballs.
    if ! (cd "$tmp" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error) >"$tmp.log" 2>&1; then
      cat "$tmp.log" >&2
      rm -rf "$tmp" "$tmp.log"
      echo "npm ci of $here/package-lock.json failed" >&2
      return 1
    fi
    rm -f "$tmp.log"
    touch "$tmp/.complete"
    # A concurrent install may have won the race; its copy is as good.
    mv -T "$tmp" "$dir" 2>/dev/null || rm -rf "$tmp"
  fi
  echo "$dir/node_modules"
}
