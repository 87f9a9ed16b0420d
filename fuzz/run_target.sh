#!/usr/bin/env bash
# run_target.sh NAME BIN SECONDS LOG -- ARGS...
#
# Runs the libFuzzer binary BIN (fuzz target NAME) with ARGS, its stderr in
# LOG, for SECONDS seconds of new inputs: the clock starts when the seed
# corpus pass ends (libFuzzer's "#N INITED"), not at start-up as its
# -max_total_time does. libFuzzer always finishes the seed pass and counts
# -max_total_time from process start, so a slow seed pass ate the budget
# (attention_fuzz: ~44 s of seed runs under ASan + UBSan left its 60 s ~15 s of
# new inputs; 2-core Intel Xeon under KVM, clang-22, 2026-11-27).
#
# At the deadline SIGTERM stops it: libFuzzer's -handle_term prints "run
# interrupted", its final stats, and exits 72, which here is a pass because
# this script sent it. Not SIGUSR1 (libFuzzer's graceful stop): a target that
# JIT-compiles a kernel loads libLLVM, whose signal handlers replace
# libFuzzer's for SIGUSR1 (then ignored) and SIGTERM (passed on to the
# handler it replaced). A crash, a mismatch, a timeout or an exit of any
# other status before the deadline fails as ever. -max_total_time stays, an
# hour later, as a backstop should this shell die first.
#
# Exit status: 0 for a run stopped at its deadline (or one that ended by
# itself with status 0), the fuzzer's status otherwise, 1 for a run that left
# no final stats (nothing shows it fuzzed), 130 / 143 when this script is
# interrupted / terminated (the fuzzer is terminated too). On success it
# prints what the target tried ("fuzz: NAME: N new inputs after the seed
# corpus's M") and warns when N is 0. `./attnkit fuzz` runs every target
# through it; fuzz/test/run_target.test tests it with a stand-in fuzzer.
set -uo pipefail

if [ $# -lt 4 ] || [ "${5:-}" != "--" ]; then
  echo "usage: run_target.sh NAME BIN SECONDS LOG -- ARGS..." >&2
  exit 2
fi
name="$1" bin="$2" seconds="$3" log="$4"
shift 5
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [ "$seconds" -lt 1 ]; then
  echo "run_target.sh: SECONDS=$seconds must be a positive number" >&2
  exit 2
fi

"$bin" "$@" -max_total_time=$((seconds + 3600)) 2>"$log" &
pid=$!
# Without job control a background job ignores SIGINT: an interrupted or
# terminated run takes its fuzzer down with it.
cancel() {
  kill -TERM "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  exit "$1"
}
trap 'cancel 130' INT
trap 'cancel 143' TERM

# Microseconds (bash's SECONDS counts whole seconds: up to 1 s short).
now_us() {
  local t="${EPOCHREALTIME//[.,]/}"
  echo $((10#$t))
}
deadline="" stopped=0
while kill -0 "$pid" 2>/dev/null; do
  if [ -z "$deadline" ] && grep -qE '^#[0-9]+[[:space:]]+INITED' "$log"; then
    deadline=$(($(now_us) + seconds * 1000000))
  fi
  if [ -n "$deadline" ] && [ "$(now_us)" -ge "$deadline" ]; then
    stopped=1
    kill -TERM "$pid" 2>/dev/null || true
    break
  fi
  # A waited-for background sleep: the wait builtin returns at once on a
  # trapped signal (bash defers a trap while a foreground child runs, and
  # drops SIGINT if that child then exits normally).
  sleep 0.2 &
  wait $! || true
done
rc=0
wait "$pid" || rc=$?
trap - INT TERM
# libFuzzer's status after SIGTERM: 72 (-handle_term's interrupt exit code).
if [ "$stopped" = 1 ] && [ "$rc" -eq 72 ] &&
  grep -q 'libFuzzer: run interrupted; exiting' "$log"; then
  rc=0
fi
[ "$rc" -eq 0 ] || exit "$rc"

# What it tried: every seed of the corpus ("#N INITED" ends that pass), then
# new inputs until the deadline. No new input is said, not hidden in a pass.
total="$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$log" | tail -1)"
seeds="$(sed -n 's/^#\([0-9]*\)[[:space:]]*INITED.*/\1/p' "$log" | tail -1)"
if [ -z "$total" ] || [ -z "$seeds" ]; then
  echo "fuzz: $name: FAILED: no run statistics in $log (-print_final_stats=1?)" >&2
  exit 1
fi
echo "fuzz: $name: $((total - seeds)) new inputs after the seed corpus's $seeds" >&2
if [ "$total" -le "$seeds" ]; then
  echo "fuzz: $name: WARNING: no new input was tried after the seed corpus" >&2
fi
