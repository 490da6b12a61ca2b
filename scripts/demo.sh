#!/usr/bin/env bash
# `make run` until the daemon exists: what cordon does that subprocess does
# not, in one minute. A command leaves a setsid'ed, double-forked grandchild
# behind and hangs; cordon stops it at the deadline, tears down the whole
# tree, and reports death only once it was observed.
set -euo pipefail
cordon=${1:-build/cordon}
state=$(mktemp -d /tmp/cordon-demo.XXXXXX)
trap 'rm -rf "$state"' EXIT

echo "== cordon probe: what this host enforces, and how"
"$cordon" probe
echo
echo "== cordon run: the sandbox's view (its own root, pid 1, no network but lo, no secrets)"
mkdir -p "$state/work"
"$cordon" run --state-dir "$state" --workspace "$state/work" --shell \
  'echo "uid $(id -u) on $(hostname) in $(pwd)"; echo "/: $(ls / | tr "\n" " ")";
   echo "processes: $(ps -e -o pid=,comm= | tr -s " \n" " ")"; echo "links: $(ls /sys/class/net 2>/dev/null || ip -o link | cut -d: -f2)";
   cat /etc/shadow | wc -c | sed "s/^/bytes of \/etc\/shadow: /"; echo hello > made-inside'
echo "made-inside on the host: $(ls -l "$state/work/made-inside")"
echo
echo "== cordon run --timeout 1: a grandchild escapes with setsid, the parent hangs"
echo "   (--isolation none: the pids written below are the host's)"
pidfile=$state/grandchild.pid
set +e
"$cordon" run --state-dir "$state" --isolation none --timeout 1 --grace 0.5 --json \
  --shell "setsid sh -c 'sleep 300 & echo \$! > $pidfile'; echo started; sleep 300" |
  /usr/bin/python3 -m json.tool
status=${PIPESTATUS[0]}
set -e
echo "exit status: $status (124: timed out)"
pid=$(cat "$pidfile")
state_letter=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || true)
if [[ -z $state_letter || $state_letter == Z ]]; then
  echo "the escaped grandchild (pid $pid) is dead"
else
  echo "the escaped grandchild (pid $pid) is still running: state $state_letter" >&2
  exit 1
fi
echo
echo "== cordon grants --all: the record in the store ($state/cordon.db)"
"$cordon" grants --all --state-dir "$state"
