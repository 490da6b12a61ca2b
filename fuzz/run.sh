#!/usr/bin/env bash
# Runs the fuzz targets built in BUILD (make fuzz, make fuzz-replay).
#
#   fuzz/run.sh fuzz BUILD SECONDS [TARGET...]
#       Each target for SECONDS (libFuzzer's -max_total_time), one after the
#       other, starting from a copy of its committed corpus in
#       BUILD/corpus/<target> (new inputs go there, never into fuzz/corpus).
#       Prints per target libFuzzer's "Done N runs in S second(s)" and any
#       crash; a crashing input is left in BUILD/crashes/<target>/. Exits 1
#       if any target crashed.
#   fuzz/run.sh replay BUILD [TARGET...]
#       Each target once over every file of its committed corpus (no
#       mutation, nothing written); exits 1 if any input crashes.
#
# A target is fuzz/<target>.cc; its seeds are fuzz/corpus/<target>/.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
mode=${1:?usage: run.sh fuzz BUILD SECONDS [TARGET...] | replay BUILD [TARGET...]}
build=${2:?the fuzz build directory}
shift 2
if [[ $mode == fuzz ]]; then
  seconds=${1:?seconds per target}
  shift
fi

# A UBSan report is a crash, as an ASan one is (the code is also built with
# -fno-sanitize-recover=all); leaks are reported too.
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:abort_on_error=1:detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:print_stacktrace=1}

# Symbolized stacks in the reports (Debian's clang-16 does not put
# llvm-symbolizer on PATH).
if [[ -z ${ASAN_SYMBOLIZER_PATH:-} && -x /usr/lib/llvm-16/bin/llvm-symbolizer ]]; then
  export ASAN_SYMBOLIZER_PATH=/usr/lib/llvm-16/bin/llvm-symbolizer
fi

targets=("$@")
if ((${#targets[@]} == 0)); then
  for src in "$here"/*.cc; do targets+=("$(basename "$src" .cc)"); done
fi

failed=()
for t in "${targets[@]}"; do
  bin=$build/$t
  corpus=$here/corpus/$t
  if [[ ! -x $bin ]]; then
    echo "$t: no binary at $bin (build with make fuzz-build)" >&2
    failed+=("$t")
    continue
  fi
  if [[ ! -d $corpus ]] || [[ -z $(ls -A "$corpus") ]]; then
    echo "$t: no seed corpus at $corpus" >&2
    failed+=("$t")
    continue
  fi
  log=$build/logs/$t.log
  mkdir -p "$build/logs"
  if [[ $mode == replay ]]; then
    mapfile -t inputs < <(find "$corpus" -type f | sort)
    if "$bin" -runs=1 "${inputs[@]}" >"$log" 2>&1; then
      echo "$t: ${#inputs[@]} inputs replayed, no crash"
    else
      echo "$t: CRASH replaying fuzz/corpus/$t (log: $log)"
      grep -E '^Running: |ERROR: |SUMMARY: |runtime error|property failed' "$log" | tail -5 |
        sed 's/^/  /'
      failed+=("$t")
    fi
    continue
  fi
  work=$build/corpus/$t
  crashes=$build/crashes/$t
  mkdir -p "$work" "$crashes"
  cp -n "$corpus"/* "$work"/
  # -timeout: one input taking 10 s is a hang, reported as a crash.
  "$bin" -max_total_time="$seconds" -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$crashes/" "$work" >"$log" 2>&1
  rc=$?
  done_line=$(grep -E '^Done [0-9]+ runs' "$log" | tail -1)
  execs=$(grep -E '^stat::number_of_executed_units' "$log" | head -1 | awk '{print $2}')
  per_second=$(grep -E '^stat::average_exec_per_sec' "$log" | head -1 | awk '{print $2}')
  if ((rc == 0)); then
    echo "$t: ${done_line:-(no Done line)} (${per_second:-?} exec/s, corpus $(ls "$work" | wc -l) inputs)"
  else
    echo "$t: CRASH after ${execs:-?} runs (exit $rc; log: $log)"
    grep -E 'ERROR: |SUMMARY: |runtime error|property failed|Test unit written' "$log" | head -6 |
      sed 's/^/  /'
    failed+=("$t")
  fi
done

if ((${#failed[@]} > 0)); then
  echo "fuzz $mode: failed: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz $mode: ${#targets[@]} targets, no crash"
