#!/usr/bin/env bash
# Runs every unit and integration test binary of rate_limit_window_core
# under valgrind memcheck: the stand-in for Miri on the core's unsafe code
# (raw region pointers, 128-bit atomics, the shared mapping across fork).
#
#   scripts/memcheck.sh                 # all test binaries
#   PROPTEST_CASES=64 scripts/memcheck.sh
#   MEMCHECK_FILTER=table scripts/memcheck.sh   # passed to the test harness
#
# Valgrind slows code ~50x, so property tests run PROPTEST_CASES cases
# (default 16) and #[ignore]d soak tests are skipped. Exits non-zero on the
# first binary with a memcheck error or a failing test.
set -euo pipefail

cd "$(dirname "$0")/.."
if ! command -v valgrind >/dev/null; then
    echo "valgrind is not installed (apt-get install valgrind)" >&2
    exit 2
fi
export PROPTEST_CASES=${PROPTEST_CASES:-16}
# Test binaries are built unoptimized with debug info: best stack traces,
# and every debug assertion and overflow check on.
json=$(cargo test -p rate_limit_window_core --no-run --message-format=json 2>/dev/null)
mapfile -t bins < <(grep '"reason":"compiler-artifact"' <<<"$json" \
    | grep '"test":true' | grep -o '"executable":"[^"]*"' | sed 's/"executable":"\(.*\)"/\1/')
if [ ${#bins[@]} -eq 0 ]; then
    echo "no test binaries found" >&2
    exit 1
fi

logdir=target/memcheck
mkdir -p "$logdir"
rm -f "$logdir"/*.log "$logdir"/*.log.*
status=0
for bin in "${bins[@]}"; do
    name=$(basename "$bin")
    log=$logdir/$name.log
    start=$(date +%s)
    # --fair-sched: the tests spin on atomics across threads.
    # Children created by fork() are checked too (cross_process).
    if valgrind --tool=memcheck --error-exitcode=1 --leak-check=no \
        --fair-sched=yes --track-origins=yes --log-file="$log.%p" \
        "$bin" ${MEMCHECK_FILTER:+"$MEMCHECK_FILTER"} --test-threads=2 >"$log" 2>&1; then
        result=ok
    else
        result=FAILED
        status=1
    fi
    tests=$(grep -o '^test result: .*' "$log" | sed 's/; finished.*//' || true)
    errors=$(cat "$log".* 2>/dev/null | grep -o 'ERROR SUMMARY: [0-9]* errors' | awk '{s+=$3} END {print s+0}')
    printf '%-40s %-7s %4ss  valgrind errors: %s  %s\n' "$name" "$result" "$(( $(date +%s) - start ))" "$errors" "$tests"
    if [ $result = FAILED ]; then
        tail -n 20 "$log"
        grep -h -A 12 -m 3 'Invalid\|uninitialised\|Mismatched' "$log".* 2>/dev/null | head -60 || true
    fi
done
echo "memcheck logs: $logdir/"
exit $status
