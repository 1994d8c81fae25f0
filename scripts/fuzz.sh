#!/usr/bin/env bash
# Fuzz rate_limit_window_core: builds fuzz/ with cargo-fuzz (libFuzzer) and
# runs every target for FUZZ_SECS seconds (default 60) one after the other.
#
#   FUZZ_SECS=300 scripts/fuzz.sh               # all targets, 5 min each
#   FUZZ_TARGETS="parse_time table_model" scripts/fuzz.sh
#   FUZZ_SANITIZER=none scripts/fuzz.sh         # without ASan (faster)
#
# Corpora live in fuzz/corpus/<target>/ (kept between runs, git-ignored),
# seeded with a few valid inputs. A crash input is copied to
# fuzz/regressions/<target>/, which core/tests/all/fuzz_regressions.rs replays
# under plain `cargo test`; the script then exits non-zero.
#
# cargo-fuzz needs nightly compiler flags: a nightly toolchain is used when
# rustup has one, else stable with RUSTC_BOOTSTRAP=1.
set -euo pipefail

cd "$(dirname "$0")/.."
root=$PWD
secs=${FUZZ_SECS:-60}
san=${FUZZ_SANITIZER:-address}

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "cargo-fuzz is not installed: cargo install cargo-fuzz" >&2
    exit 2
fi
if rustup run nightly rustc --version >/dev/null 2>&1; then
    tc=(+nightly)
else
    tc=()
    export RUSTC_BOOTSTRAP=1
fi

cd fuzz
all=$(cargo "${tc[@]}" fuzz list)
targets=${FUZZ_TARGETS:-$all}

echo "== building fuzz targets (sanitizer: $san)"
if ! cargo "${tc[@]}" fuzz build -O -s "$san"; then
    if [ "$san" != none ]; then
        echo "== build with -s $san failed; retrying without a sanitizer" >&2
        san=none
        cargo "${tc[@]}" fuzz build -O -s none
    else
        exit 1
    fi
fi

# A few valid inputs per target, so the fuzzer starts from accepted values.
seed() { # target name bytes...
    local dir=corpus/$1
    mkdir -p "$dir"
    [ -e "$dir/seed-$2" ] || printf '%b' "$3" >"$dir/seed-$2"
}
seed parse_size 1 '1m';    seed parse_size 2 '64k';   seed parse_size 3 '32768'
seed parse_size 4 '9223372036854775807'
seed parse_time 1 '1h30m'; seed parse_time 2 '500ms'; seed parse_time 3 '30'
seed parse_time 4 '1w2d3h4m5s6ms'; seed parse_time 5 '1h 30m'
seed parse_limit 1 '100';  seed parse_limit 2 '1000000'; seed parse_limit 3 '0'
seed zone_params 1 'zone=api:10m'
seed zone_params 2 'zone=api:10m window=1m fail=closed'
seed zone_params 3 'zone=a:b:1m redis=127.0.0.1:6379 sync=200ms secret=x'
seed zone_params 4 'zone=z:1m redis=unix:/run/redis.sock'
seed zone_params 5 'zone=z:1m redis=[::1]:6379 window=1h'
seed limit_params 1 'zone=api limit=100'
seed limit_params 2 'zone=api limit=$http_x_limit'
seed override_body 1 '{"limit": 100}'; seed override_body 2 '{"block":true,"ttl":3600}'
seed override_body 3 '{"exempt": true}'
for t in table_model table_tiny; do
    seed $t 1 '\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x00\x00\x00\x01\x05\x00\x00\x02\x05\x0f\x00\x00\x00\x03\x05'
    seed $t 2 '\x01\x10\x20\x30\x40\x50\x60\x70\x80\x09\x10\x27\x00\x00\x01\x01\x0c\x10\x27\x00\x00\x01\x01\x00\x01\x02\x01'
    seed $t 3 "$(head -c 512 /dev/zero | tr '\0' '\001')"
done
# A valid state file (estimate zone, 64 slots, an OVERRIDES section with a
# limit and a ban, a section of an unknown type).
mkdir -p corpus/state_file
cp -n regressions/state_file/* corpus/state_file/ 2>/dev/null || true

status=0
summary=()
for t in $targets; do
    dict=()
    case $t in parse_*|zone_params|limit_params) dict=(-dict="$root/fuzz/dict/params.dict") ;; esac
    log=artifacts/$t.log
    mkdir -p "artifacts/$t" "corpus/$t"
    echo "== $t: ${secs}s"
    start=$(date +%s)
    set +e
    cargo "${tc[@]}" fuzz run -O -s "$san" "$t" "corpus/$t" -- \
        -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=4096 \
        -print_final_stats=1 "${dict[@]}" >"$log" 2>&1
    rc=$?
    set -e
    took=$(( $(date +%s) - start ))
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -n1 || true)
    [ -n "$execs" ] || execs=$(grep -o '^#[0-9]*' "$log" | tail -n1 | tr -d '#' || true)
    [ -n "$execs" ] || execs=0
    result=ok
    if [ $rc -ne 0 ]; then
        result="FAILED (rc $rc)"
        status=1
        mkdir -p "$root/fuzz/regressions/$t"
        for f in artifacts/$t/crash-* artifacts/$t/leak-* artifacts/$t/timeout-* artifacts/$t/oom-*; do
            [ -e "$f" ] || continue
            cp "$f" "$root/fuzz/regressions/$t/"
            result="$result, saved fuzz/regressions/$t/$(basename "$f")"
        done
        grep -E -m 20 'panicked|ERROR: AddressSanitizer|SUMMARY|assert' "$log" || tail -n 30 "$log"
    fi
    line=$(printf '%-14s %12s execs in %4ss (%s/s)  %s' "$t" "$execs" "$took" "$(( execs / (took > 0 ? took : 1) ))" "$result")
    echo "$line"
    summary+=("$line")
done

echo
echo "== fuzz summary (sanitizer: $san, ${secs}s per target; logs in fuzz/artifacts/<target>.log)"
printf '%s\n' "${summary[@]}"
exit $status
