#!/usr/bin/env bash
# Installs the Debian packages named on the command line that are missing.
# A fresh Debian 12 machine has none of them and may have empty package
# lists, so `apt-get update` runs first whenever something must be installed.
#
# Installs may run at once: `make test` prepares the container cell in the
# background (tests/hosts/container/prepare.sh) while other targets install
# what they need. They take turns on one lock, and apt-get also waits for
# dpkg's lock, and retries the package lists' lock, when an apt this script
# did not start holds them (APT_WAIT seconds, default 600).
set -euo pipefail

missing() {
  local pkg status
  for pkg in "$@"; do
    status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
    [[ $status == "install ok installed" ]] || echo "$pkg"
  done
}

mapfile -t need < <(missing "$@")
((${#need[@]} == 0)) && exit 0

if [[ $(id -u) -ne 0 ]]; then
  echo "missing Debian packages: ${need[*]}" >&2
  echo "install them as root: apt-get update && apt-get install -y ${need[*]}" >&2
  exit 1
fi

exec 9>/var/cache/apt/cordon-install-deps.lock
flock 9
mapfile -t need < <(missing "$@") # another install may have brought them
((${#need[@]} == 0)) && exit 0

echo "installing: ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
wait_s=${APT_WAIT:-600}
apt=(apt-get -q -o "DPkg::Lock::Timeout=$wait_s")
deadline=$(($(date +%s) + wait_s))
until "${apt[@]}" update; do
  (($(date +%s) < deadline)) || { echo "apt-get update kept failing for $wait_s s" >&2; exit 1; }
  sleep 5
done
"${apt[@]}" install -y --no-install-recommends "${need[@]}"
