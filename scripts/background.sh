#!/usr/bin/env bash
# Runs a command in the background at the lowest CPU and I/O priority, its
# output in LOG, and returns at once:
#   scripts/background.sh LOG COMMAND [ARG...]
# The command stays in the caller's process group, so an interrupt of
# `make test` stops it too. It leaves the caller's make jobserver alone (a
# make it runs has jobs of its own).
set -euo pipefail
log=$1
shift
mkdir -p "$(dirname "$log")"
echo "in the background, at low priority: $* (log: $log)"
env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL nice -n 19 ionice -c 3 "$@" >"$log" 2>&1 </dev/null &
