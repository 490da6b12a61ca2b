#!/usr/bin/env bash
# Runs a command in the background at the lowest CPU and I/O priority, its
# output in LOG, and returns at once:
#   scripts/background.sh LOG COMMAND [ARG...]
# The command stays in the caller's process group, so an interrupt of
# `make test` stops it too. It leaves the caller's make jobserver alone (a
# make it runs has jobs of its own).
#   scripts/background.sh --stop LOG
# stops the command started with LOG, if it still runs, and everything it
# started: `make test` does so when a suite fails before the command's
# output is wanted. The processes are found from LOG.pid (the pid and start
# time of the shell that runs the command) and /proc, never by name.
set -euo pipefail

start_time() { # the 22nd field of /proc/PID/stat, after the ")" of comm
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  set -- $stat
  echo "${20}"
}

if [[ ${1:-} == --stop ]]; then
  pidfile=$2.pid
  read -r pid started 2>/dev/null <"$pidfile" || exit 0
  rm -f "$pidfile"
  [[ $(start_time "$pid" || true) == "$started" ]] || exit 0
  tree=("$pid")
  for ((i = 0; i < ${#tree[@]}; i++)); do
    tree+=($(cat /proc/"${tree[i]}"/task/*/children 2>/dev/null || true))
  done
  echo "stopping the background command of $2 (${#tree[@]} processes)"
  kill -TERM "${tree[@]}" 2>/dev/null || true
  exit 0
fi

log=$1
shift
mkdir -p "$(dirname "$log")"
echo "in the background, at low priority: $* (log: $log)"
(
  me=$BASHPID
  echo "$me $(start_time "$me")" >"$log.pid"
  env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL nice -n 19 ionice -c 3 "$@" || true
  rm -f "$log.pid"
) >"$log" 2>&1 </dev/null &
