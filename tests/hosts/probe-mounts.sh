#!/bin/sh
# probe-mounts.sh: run in a guest (or on any host, as root) from the source
# tree; checks what issue 12 found broken about mounts, as a user meets it:
#   1. `cordon run` with a --ro-bind, a --bind and a workspace beneath a
#      directory only root may enter (mode 0700);
#   2. `cordon serve` on loopback with its state directory on a tmpfs (on
#      Linux < 6.3 a tmpfs cannot be idmapped), a shell and a python
#      session, each running `echo hi > f && cat f`.
# With PROBE_MOUNTS_NO_LOOP=1 (a guest only: it unloads the loop module) part
# 2 runs without loop devices instead, as a host without them has it: the
# sessions' workspaces then stay on the tmpfs, unbounded and not idmapped,
# and must be given (chowned) to the sandbox. (With loop devices each
# session's workspace is an ext4 image of its own, which 6.1 can idmap.)
# Prints one "probe-mounts: <check>: ok|FAIL ..." line per check and
# "probe-mounts: N failed" last; exits 1 if any failed.
# Usage: sh tests/hosts/probe-mounts.sh [BUILD_DIR]   (default: build)

build=${1:-build}
cordon=$(cd "$build" && pwd)/cordon
port=${PROBE_MOUNTS_PORT:-7459}
failed=0
top=$(mktemp -d /tmp/probe-mounts.XXXXXX)
chmod 0700 "$top"

say() { echo "probe-mounts: $*"; }
check() { # NAME EXPECTED ACTUAL
  case $3 in
    *"$2"*) say "$1: ok" ;;
    *) say "$1: FAIL: wanted '$2' in: $3"; failed=$((failed + 1)) ;;
  esac
}

say "kernel $(uname -r)"

# --- 1. cordon run ---
mkdir -p "$top/a/data" "$top/a/rw" "$top/ws"
chmod 0700 "$top/a"
chmod 0755 "$top/a/data" "$top/ws"
chmod 0777 "$top/a/rw"
echo "from the host" > "$top/a/data/x"
out=$("$cordon" run --state-dir "$top/run-state" --ro-bind "$top/a/data:/data" -- \
  sh -c 'cat /data/x; echo no > /data/x || echo refused' 2>&1)
check "run --ro-bind under a 0700 parent" "from the host
" "$out"
check "run --ro-bind stays read-only" "refused" "$out"
out=$("$cordon" run --state-dir "$top/run-state" --bind "$top/a/rw:/rw" -- \
  sh -c 'echo hi > /rw/f && cat /rw/f' 2>&1)
check "run --bind under a 0700 parent" "hi" "$out"
# A workspace of the caller's: cordon never chowns it; the run says why the
# sandbox may not write there when it is not idmapped.
out=$(cd "$top/ws" && "$cordon" run --state-dir "$top/run-state" --json -- \
  sh -c 'echo hi > f && cat f' 2>&1)
case $out in
  *"is not idmapped"*)
    check "run in a caller's workspace that is not idmapped: the note" "only what that uid may" "$out" ;;
  *) check "run in a caller's workspace (idmapped)" '"stdout":"hi\n"' "$out" ;;
esac

# --- 2. cordon serve: shell and python sessions ---
serve_round() { # LABEL
  label=$1
  state=$top/state-$label
  mkdir -p "$state"
  mount -t tmpfs -o mode=0700 tmpfs "$state" || { say "$label: cannot mount a tmpfs"; failed=$((failed + 1)); return; }
  # A guest under TCG is slow: death is given 30 s to be seen, not 5.
  "$cordon" serve --state-dir "$state/s" --listen "127.0.0.1:$port" --verify-timeout 30 \
    > "$top/serve-$label.log" 2>&1 &
  serve=$!
  i=0
  while [ ! -s "$state/s/serve.json" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
  if [ ! -s "$state/s/serve.json" ]; then
    say "$label: the daemon did not start: $(tail -5 "$top/serve-$label.log")"
    failed=$((failed + 1))
  else
    tok=$(cat "$state/s/token")
    api() { curl -s -m 300 -H "Authorization: Bearer $tok" -H 'Content-Type: application/json' "$@"; }
    url=http://127.0.0.1:$port
    made=$(api -X POST -d '{"id":"sh1","kind":"shell"}' "$url/v1/sessions")
    say "$label: shell session: $(echo "$made" | grep -o '"state":"[a-z]*"') $(echo "$made" | grep -o '"disk":"[a-z_]*"') $(echo "$made" | grep -o '"message":"[^"]*"')"
    out=$(api -X POST -d '{"command":"echo hi > f && cat f"}' "$url/v1/sessions/sh1/exec")
    check "$label: shell session runs echo hi > f && cat f" '"stdout":"hi\n"' "$out"
    # What the workspace is: its filesystem inside, and its owner outside
    # (root's when idmapped; the sandbox's outside uid when it was given).
    fs=$(api -X POST -d '{"command":"grep \" /workspace \" /proc/self/mountinfo | cut -d\" \" -f9"}' \
      "$url/v1/sessions/sh1/exec" | grep -o '"stdout":"[^"]*"')
    say "$label: the shell's workspace: filesystem $fs, owner outside uid $(stat -c %u "$state/s/workspaces/sh1")"
    made=$(api -X POST -d '{"id":"py1","kind":"python"}' "$url/v1/sessions")
    say "$label: python session: $(echo "$made" | grep -o '"state":"[a-z]*"') $(echo "$made" | grep -o '"message":"[^"]*"')"
    code='import subprocess; print(subprocess.run("echo hi > f && cat f", shell=True, capture_output=True, text=True).stdout, end="")'
    out=$(api -X POST -d "{\"code\":$(printf '%s' "$code" | /usr/bin/python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))')}" "$url/v1/sessions/py1/exec")
    check "$label: python session runs echo hi > f && cat f" '"stdout":"hi\n"' "$out"
    warn=$(grep -o 'is not idmapped[^"]*' "$top/serve-$label.log" | sort -u | head -3)
    [ -n "$warn" ] && say "$label: daemon log: $warn"
    [ $failed = 0 ] || grep -E 'error|fail|warn' "$top/serve-$label.log" | tail -15 | sed "s/^/probe-mounts: $label: log: /"
    api -X DELETE "$url/v1/sessions/sh1" > /dev/null
    api -X DELETE "$url/v1/sessions/py1" > /dev/null
  fi
  kill -TERM $serve 2>/dev/null
  wait $serve
  umount "$state" || { say "$label: mounts left under $state"; failed=$((failed + 1)); }
}

if [ "${PROBE_MOUNTS_NO_LOOP:-0}" != 1 ]; then
  serve_round tmpfs
else
  if rmmod loop 2>/dev/null || busybox rmmod loop 2>/dev/null || [ ! -e /dev/loop-control ]; then
    serve_round tmpfs-no-loop
  else
    say "tmpfs-no-loop: loop devices stay (built in or in use): skipped"
  fi
fi

leftover=$(grep -c "$top" /proc/self/mountinfo)
[ "$leftover" = 0 ] || { say "mounts left under $top: $leftover"; failed=$((failed + 1)); }
rm -rf "$top"
say "$failed failed"
if [ "$failed" -eq 0 ]; then exit 0; fi
exit 1
