#!/usr/bin/env bash
# scripts/bench.sh: the `make bench` suite. Writes BENCHMARKS.md.
#
# Sections (BENCH_SECTIONS picks a subset, in any order):
#   throughput  req/s of no limiter vs this module vs limit_req, in one nginx
#               (one server per variant),
#               runs alternated, medians of BENCH_REPS reps, ratios per rep
#   modes       req/s of mode=strict against mode=estimate (same limit, same
#               keys), one nginx, runs alternated, ratios per rep
#   capacity    clients remembered by a 1 MB zone, this module vs limit_req
#   abusers     clients over their limit still refused after a flood of 1M new
#               clients, 1 MB zone, this module vs limit_req (not in the
#               default list: RLW_BENCH_ONLY=abusers)
#   delayq      holds per admission of one client's burst held by delay=
#               (not in the default list: RLW_BENCH_ONLY=delayq)
#   accuracy    bench/benches/accuracy.rs output, copied
#   micro       bench/benches/decision.rs (criterion), ns/decision vs mutex
#   overrides   bench/benches/overrides.rs (criterion): an override lookup in a
#               fresh table and after 1,000,000 ttl'd overrides came and went;
#               range lookups by prefix lengths in use
#   override_history  req/s of a hot client in a zone holding one override,
#               before and after 40,000 overrides with a ttl came and went
#   callgrind   instructions per request under valgrind (repeatable)
#   redis       sync on vs off: req/s and p99 with a local redis-server
#   hugepages   1M clients: the module's table on 4 KB pages vs on transparent
#               huge pages (two nginx, started with shmem_enabled never and
#               advise; needs a writable /sys/kernel/mm/transparent_hugepage)
#   scaling     the throughput nginx with 1, 2, 4, ... workers (up to nproc):
#               req/s of no limiter, this module and limit_req per worker
#               count, hot and 1M clients (on a 2-core machine: 1 and 2)
#   cluster     three gateways sharing one redis-server: one client sent
#               round-robin at 3x its limit, admitted per window against
#               the limit, beside a single gateway; then sync on vs off,
#               req/s at 10,000 and 100,000 active clients; then Redis
#               commands/s with 1,000,000 cold clients before, during and
#               after one {"limit":1} override
#   fleet_overrides  three gateways: Redis commands/s per gateway with an
#               empty overrides' hash, while 1,000,000 fields are read (in
#               pages) and after, and the time to read them
#
# Settings (environment):
#   BENCH_SECS=3       seconds per measured wrk run
#   BENCH_REPS=20      reps per variant (median, its 95% CI and min-max are reported)
#   BENCH_WARMUP=2     seconds of unrecorded warm-up per variant and scenario
#   BENCH_CONNS=32     wrk connections;  BENCH_THREADS=2  wrk threads (wrk's
#                      own default; with one, a fifth of 2 cores sat idle)
#   BENCH_QUICK=0      1: shorter criterion runs (1 s warm-up, 2 s measurement)
#   BENCH_CG_REQS=2000 requests per callgrind measurement
#   BENCH_CG_VARIANTS  callgrind variants (default: all, strict_* included)
#   BENCH_CG_FOOTPRINT variants run again with a 64-way D1 for the footprint
#                      table (default: none rlw_hot_noheaders lr_hot rlw_many
#                      lr_many strict_many; empty: none of them)
#   BENCH_CG_CACHES    valgrind's cache options of the main callgrind runs
#                      (default: this machine's L1s, a 32 MiB LL)
#   BENCH_CG_ARGS      more valgrind options (--dump-instr=yes: costs per
#                      instruction, for callgrind_annotate or objdump)
#   BENCH_SCALE_WORKERS="1 2 4 ..." worker counts for the scaling section
#                      (default: powers of two below nproc, then nproc)
#   BENCH_SCALE_REPS=5 reps per variant and worker count
#   BENCH_SCALE_THREADS wrk threads there (default: nproc/4, at least 2)
#   BENCH_SCALE_CONNS=32 wrk connections per nginx worker there
#   BENCH_MODES_REPS=10 reps per variant in the modes section
#   BENCH_CAP_RLW_N / BENCH_CAP_LR_N   key counts for the capacity section
#   BENCH_CAP_MODE=estimate            mode= of this module's capacity zones (or strict)
#   BENCH_ABUSE_N, BENCH_FLOOD_KEYS=1000000   abusers and new clients (abusers)
#   BENCH_CLUSTER_LIMIT=100, BENCH_CLUSTER_WINDOW=10, BENCH_CLUSTER_WINDOWS=4
#                      the cluster section's limit, window (s) and windows sent
#   BENCH_CLUSTER_KEYS="10000 100000" active clients of its sync on/off runs
#   BENCH_CLUSTER_REPS=6 reps per variant there
#   BENCH_OVR_KEYS=1000000 cold clients of its low-override run (0: skip it)
#   BENCH_HIST_N=40000, BENCH_HIST_CAP=16384, BENCH_HIST_REPS=3  the
#                      override_history section's overrides, overrides=, runs
#   BENCH_SCALE_GATEWAYS="1 3", BENCH_SCALE_KEYS="10000 100000 1000000",
#   BENCH_SCALE_SECS=30 (at most 55)  the cluster_scale section: gateways, cold clients
#                      sent to gateway 1 (wrk, bench/keys.lua), seconds per run
#   BENCH_SECTIONS="throughput modes capacity accuracy micro overrides override_history callgrind stream_callgrind redis hugepages scaling cluster fleet_overrides cluster_scale"
#   BENCH_OUT=BENCHMARKS.md
#   RLW_BENCH_ONLY="cluster"  run only these sections and replace only their
#                      sections in an existing BENCH_OUT (the others, the
#                      machine table included, stay as they are); overrides
#                      BENCH_SECTIONS
#
# Raw outputs stay in target/bench/results/. Progress goes to stderr.
# Exits non-zero (and leaves BENCHMARKS.md untouched) if nginx fails, a wrk
# run fails, an "admit everything" run saw a non-2xx response, a "reject
# everything" run saw anything but rejections, or a cargo bench fails.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

BENCH_SECS=${BENCH_SECS:-3}
BENCH_REPS=${BENCH_REPS:-20}
BENCH_WARMUP=${BENCH_WARMUP:-2}
BENCH_CONNS=${BENCH_CONNS:-32}
BENCH_THREADS=${BENCH_THREADS:-2}
BENCH_QUICK=${BENCH_QUICK:-0}
BENCH_CG_REQS=${BENCH_CG_REQS:-2000}
BENCH_CAP_RLW_N=${BENCH_CAP_RLW_N:-"5000 10000 20000 40000 50000 55000 60000 65000 70000 80000 100000"}
BENCH_CAP_LR_N=${BENCH_CAP_LR_N:-"2000 5000 7000 8000 9000 10000 20000"}
BENCH_ABUSE_N=${BENCH_ABUSE_N:-"100 1000 5000 10000 30000 50000"}
BENCH_FLOOD_KEYS=${BENCH_FLOOD_KEYS:-1000000}
BENCH_DELAY_BURST=${BENCH_DELAY_BURST:-30}
BENCH_CAP_MODE=${BENCH_CAP_MODE:-estimate}
BENCH_MODES_REPS=${BENCH_MODES_REPS:-10}
BENCH_SECTIONS=${BENCH_SECTIONS:-"throughput modes capacity accuracy micro overrides override_history callgrind stream_callgrind redis hugepages scaling cluster fleet_overrides cluster_scale"}
RLW_BENCH_ONLY=${RLW_BENCH_ONLY:-}
[ -z "$RLW_BENCH_ONLY" ] || BENCH_SECTIONS=$RLW_BENCH_ONLY
BENCH_CLUSTER_LIMIT=${BENCH_CLUSTER_LIMIT:-100}
BENCH_CLUSTER_WINDOW=${BENCH_CLUSTER_WINDOW:-10}
BENCH_CLUSTER_WINDOWS=${BENCH_CLUSTER_WINDOWS:-4}
BENCH_CLUSTER_KEYS=${BENCH_CLUSTER_KEYS:-"10000 100000"}
BENCH_CLUSTER_REPS=${BENCH_CLUSTER_REPS:-6}
BENCH_OVR_KEYS=${BENCH_OVR_KEYS:-1000000}
BENCH_HIST_N=${BENCH_HIST_N:-40000}
BENCH_HIST_CAP=${BENCH_HIST_CAP:-16384}
BENCH_HIST_REPS=${BENCH_HIST_REPS:-3}
BENCH_SCALE_GATEWAYS=${BENCH_SCALE_GATEWAYS:-"1 3"}
BENCH_SCALE_KEYS=${BENCH_SCALE_KEYS:-"10000 100000 1000000"}
BENCH_SCALE_SECS=${BENCH_SCALE_SECS:-30}
[ "$BENCH_SCALE_SECS" -le 55 ] || { echo "BENCH_SCALE_SECS must be at most 55 (one window)" >&2; exit 1; }
BENCH_SCALE_REPS=${BENCH_SCALE_REPS:-5}
BENCH_SCALE_CONNS=${BENCH_SCALE_CONNS:-32}
BENCH_OUT=${BENCH_OUT:-BENCHMARKS.md}
# TCP connections per stream callgrind measurement (stream_callgrind).
BENCH_SCG_CONNS=${BENCH_SCG_CONNS:-1000}
BENCH_KEYS=1000000
CARGO=${CARGO:-cargo}

DIST=target/dist
WORK=$ROOT/target/bench
RESULTS=$WORK/results
PREFIX=$WORK/prefix
BIN=$WORK/bin
BENCH_DIR=$ROOT/bench

NGINX_PID=""
CHILD_PID=""
GATEWAY_PIDS=()
START_TS=$(date +%s)

log() { echo "[bench $(date +%H:%M:%S)] $*" >&2; }
die() {
    log "ERROR: $*"
    log "BENCHMARKS.md not written; raw outputs in $RESULTS"
    exit 1
}

stop_child() {
    if [ -n "$CHILD_PID" ] && kill -0 "$CHILD_PID" 2>/dev/null; then
        kill -TERM "$CHILD_PID" 2>/dev/null || true
        wait "$CHILD_PID" 2>/dev/null || true
    fi
    CHILD_PID=""
}

stop_nginx() {
    [ -n "$NGINX_PID" ] || return 0
    if kill -0 "$NGINX_PID" 2>/dev/null; then
        kill -"${1:-TERM}" "$NGINX_PID" 2>/dev/null || true
        for _ in $(seq 100); do
            kill -0 "$NGINX_PID" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$NGINX_PID" 2>/dev/null; then
            log "nginx $NGINX_PID did not stop; killing it and its workers"
            local workers
            workers=$(pgrep -P "$NGINX_PID" || true)
            kill -KILL "$NGINX_PID" $workers 2>/dev/null || true
        fi
    fi
    wait "$NGINX_PID" 2>/dev/null || true
    NGINX_PID=""
}

cleanup() {
    local rc=$?
    stop_child
    stop_nginx TERM
    if [ -n "${OTHER_NGINX_PID:-}" ]; then
        NGINX_PID=$OTHER_NGINX_PID stop_nginx TERM
    fi
    local pid
    for pid in "${GATEWAY_PIDS[@]}"; do
        NGINX_PID=$pid stop_nginx TERM
    done
    [ -z "${THP_SAVED:-}" ] || echo "$THP_SAVED" >"$THP_CTL" 2>/dev/null || true
    [ -z "${REDIS_PID:-}" ] || kill "$REDIS_PID" 2>/dev/null || true
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

section_on() { [[ " $BENCH_SECTIONS " == *" $1 "* ]]; }

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# render TEMPLATE OUT: fills @MODULE@ @PREFIX@ @PORT@ and @WORKERS@
# (worker processes: $WORKERS, default 2).
render() {
    sed -e "s|@MODULE@|$BIN/ngx_http_rate_limit_window_module.so|g" \
        -e "s|@PREFIX@|$PREFIX|g" -e "s|@PORT@|$PORT|g" \
        -e "s|@WORKERS@|${WORKERS:-2}|g" "$1" >"$2"
}

fresh_prefix() {
    rm -rf "$PREFIX"
    mkdir -p "$PREFIX"/{conf,logs,tmp}
}

# start_nginx CONF [WRAPPER...]: nginx in the foreground of a background job
# (daemon off), so that this script owns its pid. Waits until PORT answers.
start_nginx() {
    local conf=$1
    shift
    local out
    if ! out=$("$BIN/nginx" -p "$PREFIX/" -c "$conf" -t 2>&1); then
        echo "$out" >&2
        die "nginx -t failed for $conf"
    fi
    "$@" "$BIN/nginx" -p "$PREFIX/" -c "$conf" >>"$PREFIX/logs/stdout.log" 2>&1 &
    NGINX_PID=$!
    local deadline=$((SECONDS + ${START_TIMEOUT:-20}))
    while ! curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$PORT/none/ping"; do
        if ! kill -0 "$NGINX_PID" 2>/dev/null; then
            tail -n 20 "$PREFIX/logs/error.log" "$PREFIX/logs/stdout.log" >&2 2>/dev/null || true
            NGINX_PID=""
            die "nginx exited at start ($conf)"
        fi
        [ $SECONDS -lt $deadline ] || die "nginx did not answer on port $PORT ($conf)"
        sleep 0.2
    done
}

check_nginx_alive() {
    kill -0 "$NGINX_PID" 2>/dev/null || die "nginx died during the run; see $PREFIX/logs/error.log"
    if grep -q '\[alert\]\|\[emerg\]\|\[crit\]' "$PREFIX/logs/error.log" 2>/dev/null; then
        grep '\[alert\]\|\[emerg\]\|\[crit\]' "$PREFIX/logs/error.log" | tail -n 5 >&2
        die "nginx logged alert/crit/emerg; see $PREFIX/logs/error.log"
    fi
}

status_of() { # status_of PATH KEY [PORT]
    curl -s -o /dev/null -w '%{http_code}' --max-time 5 -H "X-Key: $2" "http://127.0.0.1:${3:-$PORT}$1"
}

# ---------------------------------------------------------------- preflight

preflight() {
    [ -x "$DIST/nginx" ] || die "$DIST/nginx missing: run make build (it copies the nginx the module was built against)"
    [ -f "$DIST/ngx_http_rate_limit_window_module.so" ] || die "$DIST/ngx_http_rate_limit_window_module.so missing: run make build"
    # The numbers are stamped with this commit: refuse a module built from
    # older sources (scripts/bench.sh run without make build first).
    local so=$DIST/ngx_http_rate_limit_window_module.so newer="" f
    while IFS= read -r -d '' f; do
        if [ "$f" -nt "$so" ]; then newer=$f; break; fi
    done < <(git ls-files -z src core/src build.rs Cargo.toml Cargo.lock core/Cargo.toml 2>/dev/null)
    [ -z "$newer" ] || die "$DIST/ngx_http_rate_limit_window_module.so is older than $newer: run make build (make bench does)"
    command -v python3 >/dev/null || die "python3 is required (bench/httpclient.py, bench/report.py)"
    command -v curl >/dev/null || die "curl is required"
    python3 "$BENCH_DIR/report.py" selftest >/dev/null || die "bench/report.py selftest failed"
    if section_on throughput || section_on modes || section_on scaling || section_on hugepages || section_on redis || section_on cluster || section_on fleet_overrides || section_on cluster_scale; then
        command -v wrk >/dev/null || die "wrk is required (scripts/deps.sh wrk)"
    fi
    rm -rf "$RESULTS" "$BIN"
    mkdir -p "$RESULTS" "$BIN"
    # A private copy: other builds may replace target/dist while we run.
    cp "$DIST/nginx" "$DIST/ngx_http_rate_limit_window_module.so" "$BIN/"
    NGINX_VERSION=$("$BIN/nginx" -v 2>&1 | sed 's/^nginx version: //')
    log "nginx: $NGINX_VERSION; sections: $BENCH_SECTIONS"
    log "settings: BENCH_SECS=$BENCH_SECS BENCH_REPS=$BENCH_REPS BENCH_WARMUP=$BENCH_WARMUP BENCH_CONNS=$BENCH_CONNS BENCH_THREADS=$BENCH_THREADS BENCH_QUICK=$BENCH_QUICK"
}

# ---------------------------------------------------------------- throughput

# cpu_times: "idle total" jiffies of the whole machine, from /proc/stat
# (idle counts iowait too).
cpu_times() {
    awk '/^cpu /{print $5 + $6, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9; exit}' /proc/stat
}

# wrk_run SCEN VARIANT SECS TAG: one wrk run; checks the statuses and sets
# WRK_RESULT to "rps requests non2xx p99ms sockerr idlepct", idlepct being
# the % of the machine's CPU time left idle during the run (whether the
# setup saturated the cores). (Not called in $(...), so that die and the
# cleanup trap act on this shell.)
wrk_run() {
    local scen=$1 var=$2 secs=$3 tag=$4 port path=/$1
    # The throughput variants have a server each; others (the redis
    # section's) are locations /VARIANT/SCEN of the one server on $PORT.
    case $var in
        none) port=$PORT ;;
        rlw) port=$PORT_RLW ;;
        lr) port=$PORT_LR ;;
        rlw4k) port=$PORT_RLW_4K ;;
        rlwthp) port=$PORT_RLW_THP ;;
        *) port=$PORT path=/$var/$scen ;;
    esac
    local url="http://127.0.0.1:$port$path"
    local out="$RESULTS/wrk-$scen-$var-$tag.txt"
    local args=(-t"$BENCH_THREADS" -c"$BENCH_CONNS" -d"${secs}s" --latency --timeout 10s)
    case $scen in
        hot | rej) args+=(-H "X-Key: hot" "$url") ;;
        many*)
            # "manyN": N clients (the cluster section); "many": BENCH_KEYS
            local nkeys=${scen#many}
            nkeys=${nkeys:-$BENCH_KEYS}
            args+=(-s "$BENCH_DIR/keys.lua" "$url" -- "$nkeys" $(((RANDOM * 32768 + RANDOM) % nkeys)) "$BENCH_THREADS") ;;
    esac
    if [ "$scen" = rej ]; then
        # prime the key (first request may be admitted), then it must be over
        status_of "$path" hot "$port" >/dev/null
        if [ "$var" != none ]; then
            local st
            st=$(status_of "$path" hot "$port")
            [ "$st" = 429 ] || die "$var/rej: expected 429 after priming, got $st"
        fi
    fi
    local idle0 total0 idle1 total1
    read -r idle0 total0 < <(cpu_times)
    timeout $((secs + 60)) wrk "${args[@]}" >"$out" 2>&1 &
    CHILD_PID=$!
    wait "$CHILD_PID" || { CHILD_PID=""; cat "$out" >&2; die "wrk failed ($scen/$var)"; }
    CHILD_PID=""
    read -r idle1 total1 < <(cpu_times)
    check_nginx_alive
    local f
    f=$(python3 "$BENCH_DIR/report.py" wrk "$out")
    [ "$f" != parse-error ] || { cat "$out" >&2; die "cannot parse wrk output $out"; }
    local rps req non _p99 serr
    read -r rps req non _p99 serr <<<"$f"
    [ "$req" -gt 0 ] || die "$scen/$var: wrk completed no request"
    if [ "$scen" = rej ] && [ "$var" != none ]; then
        # limit_req (1r/m) admits one request a minute after priming, and the
        # module (1 per sliding hour) may admit one as a UTC hour begins
        local tolerated=$((1 + secs / 60))
        [ $((req - non)) -le $tolerated ] \
            || die "$scen/$var: $((req - non)) of $req responses were not rejections (see $out)"
        [ "$non" -eq "$req" ] || log "note: $scen/$var: $((req - non)) of $req requests admitted (tolerated: $tolerated)"
    else
        [ "$non" -eq 0 ] || die "$scen/$var: $non of $req responses were non-2xx in an admit-everything run (see $out)"
    fi
    [ "$serr" -eq 0 ] || log "warning: $scen/$var: $serr socket errors (see $out)"
    WRK_RESULT="$f $(awk -v i=$((idle1 - idle0)) -v t=$((total1 - total0)) \
        'BEGIN { printf "%.1f", (t > 0 ? 100 * i / t : 0) }')"
}

# start_throughput_nginx: the throughput nginx in $PREFIX, its three
# servers on distinct free ports: $PORT (no limiter), $PORT_RLW, $PORT_LR.
start_throughput_nginx() {
    fresh_prefix
    PORT=$(free_port)
    PORT_RLW=$(free_port)
    PORT_LR=$(free_port)
    while [ "$PORT_RLW" = "$PORT" ] || [ "$PORT_LR" = "$PORT" ] || [ "$PORT_LR" = "$PORT_RLW" ]; do
        PORT_RLW=$(free_port)
        PORT_LR=$(free_port)
    done
    render "$BENCH_DIR/throughput.conf.in" "$PREFIX/conf/nginx.conf"
    sed -i -e "s|@PORT_RLW@|$PORT_RLW|g" -e "s|@PORT_LR@|$PORT_LR|g" "$PREFIX/conf/nginx.conf"
    start_nginx "$PREFIX/conf/nginx.conf"
}

# alternate_reps SCEN REPS TAG TSV LINE LABEL VARIANT...: after a
# BENCH_WARMUP s warm-up of each variant, REPS reps of one BENCH_SECS wrk run
# per variant, alternated, the first variant rotating from rep to rep.
# Appends "LINE REP VARIANT RESULT" to TSV for each run; TAG prefixes the
# raw outputs' names, LABEL the progress lines.
alternate_reps() {
    local scen=$1 reps=$2 tag=$3 tsv=$4 line=$5 label=$6
    shift 6
    local vars=("$@") n=$# rep i v f
    if [ "$BENCH_WARMUP" != 0 ]; then
        for v in "${vars[@]}"; do
            log "$label: warm-up $v ${BENCH_WARMUP}s"
            wrk_run "$scen" "$v" "$BENCH_WARMUP" "${tag}warmup"
        done
    fi
    for rep in $(seq 1 "$reps"); do
        for i in $(seq 0 $((n - 1))); do
            v=${vars[$(((i + rep - 1) % n))]}
            wrk_run "$scen" "$v" "$BENCH_SECS" "$tag$rep"
            f=$WRK_RESULT
            log "$label rep $rep/$reps $v: $(cut -d' ' -f1 <<<"$f") req/s"
            echo "$line $rep $v $f" >>"$tsv"
        done
    done
}

bench_throughput() {
    log "== throughput: ${BENCH_REPS} reps x ${BENCH_SECS}s per variant, wrk -t$BENCH_THREADS -c$BENCH_CONNS"
    start_throughput_nginx
    local tsv=$RESULTS/throughput.tsv
    echo "# scenario rep variant rps requests non2xx p99ms sockerr idlepct" >"$tsv"
    local scen vars
    for scen in hot many rej; do
        if [ "$scen" = rej ]; then vars=(rlw lr); else vars=(none rlw lr); fi
        alternate_reps "$scen" "$BENCH_REPS" "" "$tsv" "$scen" "$scen" "${vars[@]}"
    done
    stop_nginx
    THROUGHPUT_MD=$(python3 "$BENCH_DIR/report.py" throughput "$tsv")
}

# ---------------------------------------------------------------- modes

# bench_modes: one nginx, an estimate and a strict zone per scenario with
# the same limit (65,535, strict's maximum) and window; locations
# /est/SCEN and /strict/SCEN. A strict limit caps one key at 65,535 per
# 1 s window (6/7 of it under saturation), below what one key gets here, so
# the "hot" scenario is 16 keys (many16); "many10000" is 10,000 keys.
bench_modes() {
    log "== modes: ${BENCH_MODES_REPS} reps x ${BENCH_SECS}s per variant, strict vs estimate"
    fresh_prefix
    PORT=$(free_port)
    {
        conf_head
        cat <<EOF
    rate_limit_window_zone \$http_x_key zone=est_hot:1m window=1s;
    rate_limit_window_zone \$http_x_key zone=strict_hot:1m window=1s mode=strict;
    rate_limit_window_zone \$http_x_key zone=est_many:4m window=1m;
    rate_limit_window_zone \$http_x_key zone=strict_many:4m window=1m mode=strict;
    server {
        listen 127.0.0.1:$PORT reuseport;
        location /none/ { empty_gif; }
        location /est/many16 { rate_limit_window zone=est_hot limit=65535; empty_gif; }
        location /strict/many16 { rate_limit_window zone=strict_hot limit=65535; empty_gif; }
        location /est/many10000 { rate_limit_window zone=est_many limit=65535; empty_gif; }
        location /strict/many10000 { rate_limit_window zone=strict_many limit=65535; empty_gif; }
    }
}
EOF
    } >"$PREFIX/conf/nginx.conf"
    start_nginx "$PREFIX/conf/nginx.conf"
    local tsv=$RESULTS/modes.tsv scen
    echo "# scenario rep variant rps requests non2xx p99ms sockerr idlepct" >"$tsv"
    for scen in many16 many10000; do
        alternate_reps "$scen" "$BENCH_MODES_REPS" modes "$tsv" "$scen" "modes $scen" est strict
    done
    stop_nginx
    MODES_MD=$(python3 "$BENCH_DIR/report.py" modes "$tsv")
}

# ---------------------------------------------------------------- capacity

bench_capacity() {
    log "== capacity: 1 MB zones; this module N = $BENCH_CAP_RLW_N; limit_req N = $BENCH_CAP_LR_N"
    fresh_prefix
    PORT=$(free_port)
    local conf=$PREFIX/conf/nginx.conf n
    render "$BENCH_DIR/capacity-head.conf.in" "$conf"
    for n in $BENCH_CAP_RLW_N; do
        echo "    rate_limit_window_zone \$http_x_key zone=cap_rlw_$n:1m window=1h mode=$BENCH_CAP_MODE;" >>"$conf"
    done
    for n in $BENCH_CAP_LR_N; do
        echo "    limit_req_zone \$http_x_key zone=cap_lr_$n:1m rate=1r/m;" >>"$conf"
    done
    {
        echo "    server {"
        echo "        listen 127.0.0.1:$PORT;"
        echo "        location /none/ { empty_gif; }"
        echo "        location = /metrics { rate_limit_window_metrics; }"
        for n in $BENCH_CAP_RLW_N; do
            echo "        location = /rlw/$n { rate_limit_window zone=cap_rlw_$n limit=1; rate_limit_window_status 429; rate_limit_window_log_level info; rate_limit_window_headers off; empty_gif; }"
        done
        for n in $BENCH_CAP_LR_N; do
            echo "        location = /lr/$n { limit_req zone=cap_lr_$n; limit_req_status 429; limit_req_log_level info; empty_gif; }"
        done
        echo "    }"
        echo "}"
    } >>"$conf"
    start_nginx "$conf"
    local jsonl=$RESULTS/capacity.jsonl j
    : >"$jsonl"
    local t0=$SECONDS
    for n in $BENCH_CAP_LR_N; do
        j=$(python3 "$BENCH_DIR/httpclient.py" capacity "$PORT" "/lr/$n" "$n") || die "capacity client failed (lr, N=$n)"
        log "capacity limit_req N=$n: $j"
        echo "{\"variant\": \"lr\", ${j#\{}" >>"$jsonl"
        check_nginx_alive
    done
    for n in $BENCH_CAP_RLW_N; do
        j=$(python3 "$BENCH_DIR/httpclient.py" capacity "$PORT" "/rlw/$n" "$n" 128 /metrics "cap_rlw_$n") || die "capacity client failed (rlw, N=$n)"
        log "capacity rate_limit_window N=$n: $j"
        echo "{\"variant\": \"rlw\", ${j#\{}" >>"$jsonl"
        check_nginx_alive
    done
    # limit_req needs its 2nd pass within 60 s of the 1st (rate=1r/m); each
    # N's two passes take well under a second here, but say so if not.
    [ $((SECONDS - t0)) -lt 600 ] || log "warning: capacity section was slow ($((SECONDS - t0)) s)"
    stop_nginx
    CAPACITY_MD=$(python3 "$BENCH_DIR/report.py" capacity "$jsonl")
}

# ---------------------------------------------------------------- abusers

# flood_keys PATH N: wrk runs of 5 s with a new X-Key per request
# (bench/keys.lua) until N requests were sent; prints how many.
flood_keys() {
    local path=$1 want=$2 sent=0 out n
    out=$RESULTS/abusers-wrk.txt
    while [ "$sent" -lt "$want" ]; do
        timeout 60 wrk -t2 -c32 -d5s -s "$BENCH_DIR/keys.lua" "http://127.0.0.1:$PORT$path" \
            -- "$want" "$((sent / 2))" 2 >"$out" 2>&1 || { cat "$out" >&2; die "wrk failed (abusers)"; }
        n=$(awk '/requests in/ {print $1}' "$out")
        [ "${n:-0}" -gt 0 ] || { cat "$out" >&2; die "wrk completed no request (abusers)"; }
        sent=$((sent + n))
    done
    echo "$sent"
}

# N abusers over a limit of 1 in a 1 MB zone, then BENCH_FLOOD_KEYS new
# clients: how many abusers are still refused, this module vs limit_req.
bench_abusers() {
    log "== abusers: 1 MB zones; N = $BENCH_ABUSE_N; flood of $BENCH_FLOOD_KEYS new keys"
    fresh_prefix
    PORT=$(free_port)
    local conf=$PREFIX/conf/nginx.conf n v j sent refused
    render "$BENCH_DIR/capacity-head.conf.in" "$conf"
    for n in $BENCH_ABUSE_N; do
        echo "    rate_limit_window_zone \$http_x_key zone=ab_rlw_$n:1m window=1h;" >>"$conf"
        echo "    limit_req_zone \$http_x_key zone=ab_lr_$n:1m rate=1r/m;" >>"$conf"
    done
    {
        echo "    server {"
        echo "        listen 127.0.0.1:$PORT;"
        echo "        location /none/ { empty_gif; }"
        for n in $BENCH_ABUSE_N; do
            echo "        location = /rlw/$n { rate_limit_window zone=ab_rlw_$n limit=1; rate_limit_window_log_level info; rate_limit_window_headers off; empty_gif; }"
            echo "        location = /lr/$n { limit_req zone=ab_lr_$n; limit_req_status 429; limit_req_log_level info; empty_gif; }"
        done
        echo "    }"
        echo "}"
    } >>"$conf"
    start_nginx "$conf"
    ABUSERS_MD="| abusers N | this module: still refused | limit_req: still refused | new clients sent (this module / limit_req) |
|---:|---:|---:|---|"
    for n in $BENCH_ABUSE_N; do
        local row="| $n" sents=""
        for v in rlw lr; do
            j=$(python3 "$BENCH_DIR/httpclient.py" abusers "$PORT" "/$v/$n" "$n" prime) || die "abusers prime failed ($v, N=$n)"
            log "abusers $v N=$n prime: $j"
            sent=$(flood_keys "/$v/$n" "$BENCH_FLOOD_KEYS")
            j=$(python3 "$BENCH_DIR/httpclient.py" abusers "$PORT" "/$v/$n" "$n" check) || die "abusers check failed ($v, N=$n)"
            log "abusers $v N=$n after $sent new clients: $j"
            refused=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["refused"])' "$j")
            row+=" | $refused ($((100 * refused / n))%)"
            sents+="${sents:+ / }$sent"
            check_nginx_alive
        done
        ABUSERS_MD+=$'\n'"$row | $sents |"
    done
    stop_nginx
}

# ---------------------------------------------------------------- delay queue

# Issue 36's delay case: one worker, limit=2 per 2 s, delay=10s
# delay_max_held=20, BENCH_DELAY_BURST requests of one client at once;
# holds logged ("delaying request by") per held-then-admitted request.
bench_delayq() {
    log "== delayq: $BENCH_DELAY_BURST requests of one client at once, limit=2 per 2 s, delay=10s"
    fresh_prefix
    PORT=$(free_port)
    local conf=$PREFIX/conf/nginx.conf
    render "$BENCH_DIR/capacity-head.conf.in" "$conf"
    cat >>"$conf" <<CONF
    rate_limit_window_zone \$http_x_key zone=q:1m window=2s;
    server {
        listen 127.0.0.1:$PORT;
        location /none/ { empty_gif; }
        location = /metrics { rate_limit_window_metrics; }
        location = /q { rate_limit_window zone=q limit=2 delay=10s delay_max_held=20; empty_gif; }
    }
}
CONF
    start_nginx "$conf"
    local out=$RESULTS/delayq.txt i holds admitted pids=()
    : >"$out"
    for i in $(seq "$BENCH_DELAY_BURST"); do
        curl -s -o /dev/null -w '%{http_code}\n' --max-time 30 -H "X-Key: one" "http://127.0.0.1:$PORT/q" >>"$out" &
        pids+=($!)
    done
    wait "${pids[@]}"
    check_nginx_alive
    holds=$(grep -c "delaying request by" "$PREFIX/logs/error.log" || true)
    admitted=$(curl -s "http://127.0.0.1:$PORT/metrics" | awk '/^rate_limit_window_delayed_total\{zone="q",result="admitted"\}/ {print $2}')
    stop_nginx
    log "delayq: statuses $(sort "$out" | uniq -c | tr '\n' ' '); $holds holds, $admitted held then admitted"
    DELAYQ_MD="| requests at once | 200 | 429 | held then admitted | holds logged | holds per admission |
|---:|---:|---:|---:|---:|---:|
| $BENCH_DELAY_BURST | $(grep -c '^200' "$out") | $(grep -c '^429' "$out") | $admitted | $holds | $(python3 -c 'import sys; a=float(sys.argv[2] or 0); print("%.2f" % (float(sys.argv[1]) / a) if a else "n/a")' "$holds" "$admitted") |"
}

# ---------------------------------------------------------------- core benches

has_bench() { grep -q "^name = \"$1\"" bench/Cargo.toml && [ -f "bench/benches/$1.rs" ]; }

bench_accuracy() {
    log "== accuracy: cargo bench -p rate_limit_window_bench --bench accuracy"
    local out=$RESULTS/accuracy.txt
    if ! has_bench accuracy; then
        ACCURACY_MD="_Not run: bench/benches/accuracy.rs is not there yet. \`make bench\` runs it once it exists._"
        log "accuracy bench not present; skipped"
        return
    fi
    $CARGO bench -p rate_limit_window_bench --bench accuracy >"$out" 2>"$RESULTS/accuracy.stderr" \
        || { tail -n 30 "$RESULTS/accuracy.stderr" >&2; die "cargo bench --bench accuracy failed"; }
    ACCURACY_MD=$(python3 "$BENCH_DIR/report.py" accuracy "$out")
}

bench_micro() {
    local extra=()
    [ "$BENCH_QUICK" = 1 ] && extra=(-- --warm-up-time 0.5 --measurement-time 1)
    log "== micro: cargo bench -p rate_limit_window_bench --bench decision ${extra[*]}"
    local out=$RESULTS/criterion.txt
    if ! has_bench decision; then
        MICRO_MD="_Not run: bench/benches/decision.rs is not there yet._"
        return
    fi
    $CARGO bench -p rate_limit_window_bench --bench decision "${extra[@]}" >"$out" 2>"$RESULTS/criterion.stderr" \
        || { tail -n 30 "$RESULTS/criterion.stderr" >&2; die "cargo bench --bench decision failed"; }
    # criterion prints part of its report on stderr when not on a terminal
    cat "$RESULTS/criterion.stderr" >>"$out"
    MICRO_MD=$(python3 "$BENCH_DIR/report.py" criterion "$out")
}

bench_overrides() {
    local extra=()
    [ "$BENCH_QUICK" = 1 ] && extra=(-- --warm-up-time 0.5 --measurement-time 1)
    log "== overrides: cargo bench -p rate_limit_window_bench --bench overrides ${extra[*]}"
    local out=$RESULTS/overrides.txt
    if ! has_bench overrides; then
        OVERRIDES_MD="_Not run: bench/benches/overrides.rs is not there._"
        return
    fi
    $CARGO bench -p rate_limit_window_bench --bench overrides "${extra[@]}" >"$out" 2>"$RESULTS/overrides.stderr" \
        || { tail -n 30 "$RESULTS/overrides.stderr" >&2; die "cargo bench --bench overrides failed"; }
    cat "$RESULTS/overrides.stderr" >>"$out"
    OVERRIDES_MD=$(python3 "$BENCH_DIR/report.py" overrides "$out")
}

# ---------------------------------------------------------------- override history

# override_history_body: the http block's body of the override_history
# nginx (on $PORT): zone `h` (1 s windows, overrides=BENCH_HIST_CAP), one
# hot client's location /t (limit 1000000: always admitted), the API.
override_history_body() {
    cat <<EOF
    rate_limit_window_zone \$http_x_key zone=h:1m window=1s overrides=$BENCH_HIST_CAP;
    server {
        listen 127.0.0.1:$PORT reuseport;
        location /none/ { empty_gif; }
        location = /t { rate_limit_window zone=h limit=1000000; empty_gif; }
        location = /api { rate_limit_window_metrics write=on; }
    }
}
EOF
}

# hist_reps PHASE: BENCH_HIST_REPS wrk runs of the hot client; appends
# "PHASE REP RPS" lines to $RESULTS/override-history.tsv.
hist_reps() {
    local rep out
    for rep in $(seq 1 "$BENCH_HIST_REPS"); do
        out=$RESULTS/override-history-$1-$rep.txt
        wrk -t"$BENCH_THREADS" -c"$BENCH_CONNS" -d"${BENCH_SECS}s" -H "X-Key: hot" \
            "http://127.0.0.1:$PORT/t" >"$out" || die "wrk failed (override_history)"
        ! grep -q "Non-2xx" "$out" || die "override_history: the hot client was rejected (see $out)"
        echo "$1 $rep $(awk '/^Requests\/sec/ {print $2}' "$out")" >>"$RESULTS/override-history.tsv"
        log "override_history $1 rep $rep: $(awk '/^Requests\/sec/ {print $2}' "$out") req/s"
    done
}

# override_history: one nginx; a zone holding one live override (of
# another client, so that every request of the hot client looks the table
# up); req/s of the hot client, then BENCH_HIST_N overrides with a ttl of
# 1 s set through the API (at most the capacity live at once) and expired,
# then req/s again.
bench_override_history() {
    log "== override_history: hot client req/s before and after $BENCH_HIST_N expired overrides (overrides=$BENCH_HIST_CAP)"
    local saved_prefix=$PREFIX
    PREFIX=$WORK/prefix-hist
    fresh_prefix
    PORT=$(free_port)
    { conf_head; override_history_body; } >"$PREFIX/conf/nginx.conf"
    start_nginx "$PREFIX/conf/nginx.conf"
    : >"$RESULTS/override-history.tsv"
    curl -sf -X PUT -d '{"block":true}' "http://127.0.0.1:$PORT/api?zone=h&key=blocked" >/dev/null \
        || die "override_history: PUT failed"
    hist_reps before
    python3 - "$PORT" "$BENCH_HIST_N" <<'PY' || die "override_history: the PUTs failed"
import http.client, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
i = 0
while i < n:
    c.request("PUT", f"/api?zone=h&key=gone{i}", body=b'{"block":true,"ttl":1}')
    r = c.getresponse(); r.read()
    if r.status == 409:
        time.sleep(0.2)
        continue
    assert r.status == 200, r.status
    i += 1
PY
    sleep 2
    local live
    live=$(curl -s "http://127.0.0.1:$PORT/api?zone=h&overrides&count=1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["live"])')
    hist_reps after
    stop_nginx
    PREFIX=$saved_prefix
    HISTORY_MD=$(awk -v live="$live" -v n="$BENCH_HIST_N" '
        { v[$1] = v[$1] (v[$1] == "" ? "" : ", ") sprintf("%.0f", $3); a[$1, ++k[$1]] = $3 }
        function med(p,   i, j, t, m) { m = k[p]; for (i = 1; i <= m; i++) s[i] = a[p, i]
            for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (s[j] < s[i]) { t = s[i]; s[i] = s[j]; s[j] = t }
            return m % 2 ? s[(m + 1) / 2] : (s[m / 2] + s[m / 2 + 1]) / 2 }
        END {
            print "| | req/s of the hot client (each run) | median |"
            print "|---|---|---:|"
            printf "| before: one live override in the zone | %s | %.0f |\n", v["before"], med("before")
            printf "| after %d more set and expired (live count then: %s) | %s | %.0f |\n", n, live, v["after"], med("after")
            printf "\nafter / before (medians): %.3f\n", med("after") / med("before")
        }' "$RESULTS/override-history.tsv")
}

# ---------------------------------------------------------------- callgrind

callgrind_total() { # FILE -> "Ir I1mr D1 LL" totals: instructions, L1i misses, D1 misses
    # (reads and writes), LL data misses (reads and writes); the events line
    # names the columns
    awk '/^events:/ { for (i = 2; i <= NF; i++) col[$i] = i }
         /^(summary|totals):/ { print $(col["Ir"]), $(col["I1mr"]),
             $(col["D1mr"]) + $(col["D1mw"]), $(col["DLmr"]) + $(col["DLmw"]); exit }' "$1"
}

# The simulated caches, fixed so that the miss counts do not depend on what
# valgrind detects (here: a 256 MiB direct-mapped LL): first-level
# instruction and data caches of 32 KiB, 8-way, and a 32 MiB 16-way last
# level, 64-byte lines (this machine's L1s; its L3 is 32 MiB).
CG_CACHES=${BENCH_CG_CACHES-"--I1=32768,8,64 --D1=32768,8,64 --LL=33554432,16,64"}
# The same with a 64-way D1 (8 sets), for the footprint table: the lines a
# request touches that it did not touch recently, without the conflict
# misses an 8-way cache adds wherever more than 8 of the lines a request
# touches share a set (which depends on where nginx, the libraries and the
# zones happen to lie in memory, and moves with any change of the binary).
CG_CACHES_FOOTPRINT="--I1=32768,8,64 --D1=32768,64,64 --LL=33554432,16,64"

# cg_variant VARIANT: sets `limiter` (the location's directives) and `mode`
# (hot: one key; distinct: a new key per request).
cg_variant() {
    case $1 in
        none) limiter="" mode=distinct ;;
        rlw_hot) limiter="rate_limit_window zone=rlw_hot limit=1000000;" mode=hot ;;
        rlw_hot_noheaders)
            limiter="rate_limit_window zone=rlw_hot limit=1000000; rate_limit_window_headers off;"
            mode=hot ;;
        cal_hot_noheaders)
            limiter="rate_limit_window zone=cal_hot limit=1000000; rate_limit_window_headers off;"
            mode=hot ;;
        lr_hot) limiter="limit_req zone=lr_hot burst=1000000 nodelay;" mode=hot ;;
        rlw_many) limiter="rate_limit_window zone=rlw_many limit=1000000;" mode=distinct ;;
        lr_many) limiter="limit_req zone=lr_many burst=1000000 nodelay;" mode=distinct ;;
        strict_hot) limiter="rate_limit_window zone=strict_hot limit=65535;" mode=hot ;;
        strict_many) limiter="rate_limit_window zone=strict_many limit=65535;" mode=distinct ;;
        inflight_hot)
            limiter="rate_limit_window zone=rlw_hot limit=1000000 in_flight=1000;" mode=hot ;;
        inflight_alone_hot) limiter="rate_limit_window zone=rlw_hot in_flight=1000;" mode=hot ;;
        lc_hot) limiter="limit_conn lc_hot 1000;" mode=hot ;;
        inflight_many)
            limiter="rate_limit_window zone=rlw_many limit=1000000 in_flight=1000;" mode=distinct ;;
        lc_many) limiter="limit_conn lc_many 1000;" mode=distinct ;;
        shed_hot)
            limiter="rate_limit_window_shed zone=cap max=1000 priority=\$http_x_prio;" mode=hot ;;
        *) die "unknown callgrind variant $1" ;;
    esac
}

# cg_run VARIANT TSV PREFIX CACHES: the variant at both request counts under
# callgrind (out files PREFIX-VARIANT-N.out), one line of totals in TSV.
cg_run() {
    local v=$1 tsv=$2 out=$3 caches=$4 limiter mode n cnt f line
    cg_variant "$v"
    line="$v"
    for n in $small $big; do
        fresh_prefix
        PORT=$(free_port)
        render "$BENCH_DIR/callgrind.conf.in" "$PREFIX/conf/nginx.conf"
        sed -i "s|@LIMITER@|$limiter|" "$PREFIX/conf/nginx.conf"
        f=$out-$v-$n.out
        # shellcheck disable=SC2086 # caches: several options
        START_TIMEOUT=120 start_nginx "$PREFIX/conf/nginx.conf" \
            valgrind --tool=callgrind --cache-sim=yes $caches \
            --toggle-collect='*sweep::tick' --collect-atstart=yes \
            --callgrind-out-file="$f" -q ${BENCH_CG_ARGS:-}
        # start_nginx's readiness probe was one request to /none/ping
        cnt=$(python3 "$BENCH_DIR/httpclient.py" fixed "$PORT" /t "$n" "$mode") \
            || die "callgrind client failed ($v)"
        [ "$cnt" = "{\"200\": $n}" ] || die "callgrind $v: unexpected statuses $cnt"
        stop_nginx QUIT
        [ -s "$f" ] || die "callgrind wrote no $f"
        line+=" $n $(callgrind_total "$f")"
    done
    echo "$line" >>"$tsv"
    log "callgrind $v: $line"
}

# ------------------------------------------------------- stream_callgrind

# scg_variant VARIANT: sets `limiter` (the stream server's directives).
scg_variant() {
    case $1 in
        stream_none) limiter="" ;;
        stream_rlw) limiter="rate_limit_window zone=rlw limit=1000000;" ;;
        stream_rlw_in_flight) limiter="rate_limit_window zone=rlw limit=1000000 in_flight=1000;" ;;
        stream_in_flight) limiter="rate_limit_window zone=rlw in_flight=1000;" ;;
        stream_lc) limiter="limit_conn lc 1000;" ;;
        *) die "unknown stream callgrind variant $1" ;;
    esac
}

# scg_run VARIANT TSV: the variant at both connection counts under
# callgrind, one line of totals in TSV.
scg_run() {
    local v=$1 tsv=$2 limiter n f line got
    scg_variant "$v"
    line="$v"
    for n in $small $big; do
        fresh_prefix
        PORT=$(free_port)
        SPORT=$(free_port)
        render "$BENCH_DIR/stream-callgrind.conf.in" "$PREFIX/conf/nginx.conf"
        sed -i -e "s|@LIMITER@|$limiter|" -e "s|@SPORT@|$SPORT|" "$PREFIX/conf/nginx.conf"
        f=$RESULTS/stream-callgrind-$v-$n.out
        # shellcheck disable=SC2086 # caches: several options
        START_TIMEOUT=120 start_nginx "$PREFIX/conf/nginx.conf" \
            valgrind --tool=callgrind --cache-sim=yes $CG_CACHES \
            --toggle-collect='*sweep::tick' --collect-atstart=yes \
            --callgrind-out-file="$f" -q ${BENCH_CG_ARGS:-}
        # n connections one after another, each read to its end ("x").
        got=$(python3 -c '
import socket, sys
port, n, ok = int(sys.argv[1]), int(sys.argv[2]), 0
for _ in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    data = b""
    while True:
        b = s.recv(16)
        if not b:
            break
        data += b
    s.close()
    ok += data == b"x"
print(ok)' "$SPORT" "$n") || die "stream callgrind client failed ($v)"
        [ "$got" = "$n" ] || die "stream callgrind $v: $got of $n connections answered"
        stop_nginx QUIT
        [ -s "$f" ] || die "callgrind wrote no $f"
        line+=" $n $(callgrind_total "$f")"
    done
    echo "$line" >>"$tsv"
    log "stream callgrind $v: $line"
}

bench_stream_callgrind() {
    if ! command -v valgrind >/dev/null; then
        STREAM_CG_MD="_Skipped: valgrind is not installed (apt-get install valgrind)._"
        return
    fi
    local small=100 big=$((100 + BENCH_SCG_CONNS)) v
    log "== stream callgrind: instructions per TCP connection, ($big - $small) difference"
    local tsv=$RESULTS/stream-callgrind.tsv
    echo "# variant n_small ir_small i1mr_small d1m_small llm_small n_big ir_big i1mr_big d1m_big llm_big" >"$tsv"
    for v in stream_none stream_rlw stream_rlw_in_flight stream_in_flight stream_lc; do
        scg_run "$v" "$tsv"
    done
    STREAM_CG_MD=$(python3 "$BENCH_DIR/report.py" callgrind "$tsv")
}

bench_callgrind() {
    if ! command -v valgrind >/dev/null; then
        CALLGRIND_MD="_Skipped: valgrind is not installed (apt-get install valgrind)._"
        log "valgrind not installed; callgrind section skipped"
        return
    fi
    local small=200 big=$((200 + BENCH_CG_REQS)) v
    log "== callgrind: instructions and simulated cache misses per request, ($big - $small requests) difference, one nginx process"
    local tsv=$RESULTS/callgrind.tsv fp=$RESULTS/callgrind-footprint.tsv
    local head="# variant n_small ir_small i1mr_small d1m_small llm_small n_big ir_big i1mr_big d1m_big llm_big"
    echo "$head" >"$tsv"
    # Every variant requests /t from its own nginx: only the directives in
    # that location differ, not the URI or the location lookup.
    for v in ${BENCH_CG_VARIANTS:-none rlw_hot rlw_hot_noheaders cal_hot_noheaders lr_hot rlw_many lr_many strict_hot strict_many inflight_hot inflight_alone_hot lc_hot inflight_many lc_many shed_hot}; do
        cg_run "$v" "$tsv" "$RESULTS/callgrind" "$CG_CACHES"
    done
    CALLGRIND_MD=$(python3 "$BENCH_DIR/report.py" callgrind "$tsv")
    # Where each variant's cost goes, by source file (callgrind_annotate).
    CALLGRIND_SPLIT_MD=$(python3 "$BENCH_DIR/report.py" callgrind-split "$RESULTS" "$small" "$big")
    echo "$head" >"$fp"
    for v in ${BENCH_CG_FOOTPRINT-none rlw_hot_noheaders lr_hot rlw_many lr_many strict_many}; do
        cg_run "$v" "$fp" "$RESULTS/callgrind-fp" "$CG_CACHES_FOOTPRINT"
    done
    CALLGRIND_FP_MD=$(python3 "$BENCH_DIR/report.py" callgrind-footprint "$fp")
}

# ---------------------------------------------------------------- huge pages

THP_CTL=/sys/kernel/mm/transparent_hugepage/shmem_enabled

shmem_huge_kb() { awk '/^ShmemHugePages:/ { print $2 }' /proc/meminfo; }

# The module advises THP for its tables; whether Linux takes the advice is
# the host's shmem_enabled setting. Two copies of the throughput nginx: A
# started with `never` (4 KB pages), B with `advise` (2 MB pages for the
# advised tables only); the setting is put back right after. The 1M-client
# scenario then alternates no limiter (A), the module on A and on B.
bench_hugepages() {
    if ! [ -w "$THP_CTL" ]; then
        HUGEPAGES_MD="_Skipped: $THP_CTL is not writable here (it needs root, on Linux with transparent huge pages)._"
        log "huge pages: $THP_CTL not writable; section skipped"
        return
    fi
    THP_SAVED=$(sed 's/.*\[\(.*\)\].*/\1/' "$THP_CTL")
    log "== huge pages: 1M clients, the module's table on 4 KB vs 2 MB pages (shmem_enabled was $THP_SAVED)"
    local kb0 kb_a kb_b port_none
    kb0=$(shmem_huge_kb)
    echo never >"$THP_CTL"
    PREFIX=$WORK/prefix-4k
    start_throughput_nginx
    PORT_RLW_4K=$PORT_RLW
    kb_a=$(shmem_huge_kb)
    OTHER_NGINX_PID=$NGINX_PID
    NGINX_PID=""
    port_none=$PORT
    echo advise >"$THP_CTL"
    PREFIX=$WORK/prefix-thp
    start_throughput_nginx
    PORT_RLW_THP=$PORT_RLW
    kb_b=$(shmem_huge_kb)
    echo "$THP_SAVED" >"$THP_CTL"
    THP_SAVED=""
    PREFIX=$WORK/prefix
    PORT=$port_none
    log "huge pages: ShmemHugePages before $kb0 kB, after A (never) $kb_a kB, after B (advise) $kb_b kB"
    local tsv=$RESULTS/hugepages.tsv
    echo "# shmem_huge_kb before=$kb0 after_4k=$kb_a after_thp=$kb_b" >"$tsv"
    alternate_reps many "$BENCH_REPS" thp "$tsv" many "huge pages" none rlw4k rlwthp
    NGINX_PID=$OTHER_NGINX_PID stop_nginx
    OTHER_NGINX_PID=""
    stop_nginx
    HUGEPAGES_MD=$(python3 "$BENCH_DIR/report.py" hugepages "$tsv")
}

# ---------------------------------------------------------------- redis

# start_redis: a private redis-server (no persistence) on a free port,
# REDIS_PORT; its pid in REDIS_PID for stop_redis and the cleanup trap.
start_redis() {
    REDIS_PORT=$(free_port)
    redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
        >"$RESULTS/redis-server.log" 2>&1 &
    REDIS_PID=$!
    local deadline=$((SECONDS + 10))
    until redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1; do
        [ $SECONDS -lt $deadline ] || die "redis-server did not start"
        sleep 0.1
    done
}

stop_redis() {
    [ -n "${REDIS_PID:-}" ] || return 0
    kill "$REDIS_PID" 2>/dev/null || true
    wait "$REDIS_PID" 2>/dev/null || true
    REDIS_PID=""
}

# conf_head: the start of a hand-written bench nginx.conf in $PREFIX (2
# workers, the module loaded, `http {` opened with access_log off and temp
# paths in the prefix); the caller adds zones and servers and closes http.
conf_head() {
    cat <<EOF
load_module $BIN/ngx_http_rate_limit_window_module.so;
worker_processes 2;
daemon off;
master_process on;
error_log $PREFIX/logs/error.log warn;
pid $PREFIX/logs/nginx.pid;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 10000000;
    client_body_temp_path $PREFIX/tmp/body;
    proxy_temp_path $PREFIX/tmp/proxy;
    fastcgi_temp_path $PREFIX/tmp/fastcgi;
    uwsgi_temp_path $PREFIX/tmp/uwsgi;
    scgi_temp_path $PREFIX/tmp/scgi;
EOF
}

# sync_params: the zone parameters that make a zone sync through the
# bench's redis-server (every 100 ms; the secret= of 16+ characters that a
# redis= zone requires).
sync_params() { echo "redis=127.0.0.1:$REDIS_PORT sync=100ms secret=bench-secret-0123456"; }

# sync_rounds METRICS ZONE: prints the sync rounds ZONE completed, from a
# /metrics page saved in the file METRICS; dies unless the sync ran (at
# least one round) with no error of any kind in any zone.
sync_rounds() {
    local rounds errors
    rounds=$(awk -v s="rate_limit_window_sync_rounds_total{zone=\"$2\"}" '$1 == s {print $2}' "$1")
    errors=$(awk '/^rate_limit_window_sync_(errors|failures)_total/ {s += $2} END {print s + 0}' "$1")
    [ "${rounds:-0}" -gt 0 ] || die "the sync of zone $2 never completed a round (see $1)"
    [ "$errors" -eq 0 ] || die "$errors sync errors during the run (see $1)"
    echo "$rounds"
}

# Redis "sync on vs off": the same module zone with and without redis=,
# alternating reps as in bench_throughput, req/s and p99 from wrk --latency,
# against a local redis-server. Scenarios: one hot client (1 s window, so
# a limit of 1,000,000 admits everything), and 10,000
# clients (every one of them active, so every sync round pushes 10,000
# keys). The run is refused unless the sync really ran (rounds > 0, no
# errors).
bench_redis() {
    command -v redis-server >/dev/null || { REDIS_MD="_Skipped: redis-server is not installed._"; log "redis: no redis-server; skipped"; return; }
    fresh_prefix
    PORT=$(free_port)
    start_redis
    {
        conf_head
        cat <<EOF
    rate_limit_window_zone \$http_x_key zone=off_hot:1m window=1s;
    rate_limit_window_zone \$http_x_key zone=off_many:4m window=1m;
    rate_limit_window_zone \$http_x_key zone=on_hot:1m window=1s $(sync_params);
    rate_limit_window_zone \$http_x_key zone=on_many:4m window=1m $(sync_params);
    server {
        listen 127.0.0.1:$PORT reuseport;
        location /none/ { empty_gif; }
        location /off/hot { rate_limit_window zone=off_hot limit=1000000; empty_gif; }
        location /off/many { rate_limit_window zone=off_many limit=1000000; empty_gif; }
        location /on/hot { rate_limit_window zone=on_hot limit=1000000; empty_gif; }
        location /on/many { rate_limit_window zone=on_many limit=1000000; empty_gif; }
        location = /metrics { rate_limit_window_metrics; }
    }
}
EOF
    } >"$PREFIX/conf/nginx.conf"
    start_nginx "$PREFIX/conf/nginx.conf"
    local saved_keys=$BENCH_KEYS
    BENCH_KEYS=10000
    local tsv=$RESULTS/redis.tsv scen rep v i f vars=(off on)
    echo "# scenario rep variant rps requests non2xx p99ms sockerr idlepct" >"$tsv"
    for scen in hot many; do
        for rep in $(seq 1 "$BENCH_REPS"); do
            for i in 0 1; do
                v=${vars[$(((i + rep - 1) % 2))]}
                wrk_run "$scen" "$v" "$BENCH_SECS" "redis$rep"
                f=$WRK_RESULT
                log "redis $scen rep $rep/$BENCH_REPS sync $v: $(cut -d' ' -f1 <<<"$f") req/s, p99 $(cut -d' ' -f4 <<<"$f") ms"
                echo "$scen $rep $v $f" >>"$tsv"
            done
        done
    done
    BENCH_KEYS=$saved_keys
    local rounds
    curl -s "http://127.0.0.1:$PORT/metrics" >"$RESULTS/redis-metrics.txt"
    stop_nginx
    stop_redis
    rounds=$(sync_rounds "$RESULTS/redis-metrics.txt" on_many)
    REDIS_MD=$(python3 "$BENCH_DIR/report.py" redis "$tsv" "$rounds")
}

# ---------------------------------------------------------------- cluster

# start_gateways N: N nginx gateways, each in its own prefix
# ($WORK/prefix-gwI) and on its own port (GATEWAY_PORTS; their pids in
# GATEWAY_PIDS for stop_gateways and the cleanup trap). Two zones, windows
# of BENCH_CLUSTER_WINDOW s: `sync` shares its counts through the bench's
# redis-server, `local` does not; /sync and /local each limit an X-Key to
# BENCH_CLUSTER_LIMIT requests per window.
start_gateways() {
    launch_gateways "$1" cluster_gateway_body
}

# cluster_gateway_body: the http block's body of one start_gateways gateway
# (on $PORT).
cluster_gateway_body() {
    cat <<EOF
    rate_limit_window_zone \$http_x_key zone=sync:1m window=${BENCH_CLUSTER_WINDOW}s $(sync_params);
    rate_limit_window_zone \$http_x_key zone=local:1m window=${BENCH_CLUSTER_WINDOW}s;
    server {
        listen 127.0.0.1:$PORT reuseport;
        location /none/ { empty_gif; }
        location = /sync { rate_limit_window zone=sync limit=$BENCH_CLUSTER_LIMIT; rate_limit_window_log_level info; empty_gif; }
        location = /local { rate_limit_window zone=local limit=$BENCH_CLUSTER_LIMIT; rate_limit_window_log_level info; empty_gif; }
        location = /metrics { rate_limit_window_metrics; }
    }
}
EOF
}

# launch_gateways N BODY: N nginx gateways, each in its own prefix
# ($WORK/prefix-gwI), on its own port (GATEWAY_PORTS; pids in GATEWAY_PIDS
# for stop_gateways and the cleanup trap); BODY prints the configuration
# after conf_head, with $PORT set.
launch_gateways() {
    local i saved_prefix=$PREFIX
    GATEWAY_PORTS=() GATEWAY_PIDS=()
    for i in $(seq 1 "$1"); do
        PREFIX=$WORK/prefix-gw$i
        fresh_prefix
        PORT=$(free_port)
        { conf_head; "$2"; } >"$PREFIX/conf/nginx.conf"
        start_nginx "$PREFIX/conf/nginx.conf"
        GATEWAY_PORTS+=("$PORT")
        GATEWAY_PIDS+=("$NGINX_PID")
        NGINX_PID=""
    done
    PREFIX=$saved_prefix
}

stop_gateways() {
    local pid
    for pid in "${GATEWAY_PIDS[@]}"; do
        NGINX_PID=$pid stop_nginx
    done
    GATEWAY_PIDS=()
}

# cluster_admission: three gateways; one client round-robin across them at
# three times its limit, beside one client at the same rate on the first
# gateway alone and one round-robin on the zone without sync (the three
# clients interleaved, bench/httpclient.py cluster), for
# BENCH_CLUSTER_WINDOWS windows. Raw result: $RESULTS/cluster-admission.json.
cluster_admission() {
    log "cluster: 3 gateways, limit $BENCH_CLUSTER_LIMIT per ${BENCH_CLUSTER_WINDOW}s window at 3x that rate, $BENCH_CLUSTER_WINDOWS windows"
    start_gateways 3
    local ports json=$RESULTS/cluster-admission.json i
    ports=$(IFS=,; echo "${GATEWAY_PORTS[*]}")
    python3 "$BENCH_DIR/httpclient.py" cluster "$ports" "$BENCH_CLUSTER_WINDOW" \
        "$BENCH_CLUSTER_LIMIT" "$BENCH_CLUSTER_WINDOWS" >"$json" || die "cluster client failed"
    log "cluster admission: $(cat "$json")"
    for i in 1 2 3; do
        curl -s "http://127.0.0.1:${GATEWAY_PORTS[$((i - 1))]}/metrics" >"$RESULTS/cluster-metrics-gw$i.txt"
        NGINX_PID=${GATEWAY_PIDS[$((i - 1))]} PREFIX=$WORK/prefix-gw$i check_nginx_alive
    done
    stop_gateways
    sync_rounds "$RESULTS/cluster-metrics-gw1.txt" sync >/dev/null
}

# cluster_throughput: one nginx, sync off vs on (zones without and with
# redis=) at each count of active clients in BENCH_CLUSTER_KEYS (wrk with
# bench/keys.lua, scenario manyN), alternated as in bench_throughput,
# BENCH_CLUSTER_REPS reps. Raw results: $RESULTS/cluster-sync.tsv. Failed
# sync rounds are a result here (a round that cannot finish within its
# deadline under load), reported with the metrics, not a reason to stop.
cluster_throughput() {
    fresh_prefix
    PORT=$(free_port)
    local n
    {
        conf_head
        for n in $BENCH_CLUSTER_KEYS; do
            echo "    rate_limit_window_zone \$http_x_key zone=off_$n:16m window=1m;"
            echo "    rate_limit_window_zone \$http_x_key zone=on_$n:16m window=1m $(sync_params);"
        done
        echo "    server {"
        echo "        listen 127.0.0.1:$PORT reuseport;"
        echo "        location /none/ { empty_gif; }"
        echo "        location = /metrics { rate_limit_window_metrics; }"
        for n in $BENCH_CLUSTER_KEYS; do
            echo "        location = /off/many$n { rate_limit_window zone=off_$n limit=1000000; empty_gif; }"
            echo "        location = /on/many$n { rate_limit_window zone=on_$n limit=1000000; empty_gif; }"
        done
        echo "    }"
        echo "}"
    } >"$PREFIX/conf/nginx.conf"
    start_nginx "$PREFIX/conf/nginx.conf"
    local tsv=$RESULTS/cluster-sync.tsv
    echo "# clients rep variant rps requests non2xx p99ms sockerr idlepct" >"$tsv"
    for n in $BENCH_CLUSTER_KEYS; do
        alternate_reps "many$n" "$BENCH_CLUSTER_REPS" cluster "$tsv" "$n" "cluster sync, $n clients" off on
    done
    curl -s "http://127.0.0.1:$PORT/metrics" >"$RESULTS/cluster-sync-metrics.txt"
    : >"$RESULTS/cluster-sync-catchup.txt"
    for n in $BENCH_CLUSTER_KEYS; do
        echo "$n $(sync_catch_up "on_$n" 20)" >>"$RESULTS/cluster-sync-catchup.txt"
    done
    stop_nginx
}

# sync_catch_up ZONE MAX: seconds (to 0.5 s) after the load until ZONE's
# sync completed a round again (lag under 1 s), or "-" when not within MAX s.
sync_catch_up() {
    local t=0 lag
    while [ "$t" -le $(($2 * 2)) ]; do
        lag=$(curl -s "http://127.0.0.1:$PORT/metrics" | awk -v s="rate_limit_window_sync_lag_seconds{zone=\"$1\"}" '$1 == s {print $2}')
        if awk -v l="${lag:--1}" 'BEGIN { exit !(l >= 0 && l < 1) }'; then
            echo "$((t / 2)).$((t % 2 * 5))"
            return
        fi
        sleep 0.5
        t=$((t + 1))
    done
    echo "-"
}

bench_cluster() {
    command -v redis-server >/dev/null || { CLUSTER_MD="_Skipped: redis-server is not installed._"; log "cluster: no redis-server; skipped"; return; }
    log "== cluster: admission across 3 gateways; sync on vs off at $BENCH_CLUSTER_KEYS clients"
    start_redis
    cluster_admission
    cluster_throughput
    CLUSTER_OVR_MD=""
    [ "$BENCH_OVR_KEYS" -eq 0 ] || cluster_override
    stop_redis
    CLUSTER_MD=$(python3 "$BENCH_DIR/report.py" cluster "$RESULTS/cluster-admission.json" \
        "$RESULTS/cluster-sync.tsv" "$RESULTS/cluster-sync-metrics.txt" "$RESULTS/cluster-sync-catchup.txt")
}

# ---------------------------------------------------------------- cluster: a low override

OVR_BENCH_LIMIT=100

# override_gateway_body: the http block's body of one cluster_override
# gateway (on $PORT): zone `o` sized for BENCH_OVR_KEYS clients, windows of
# BENCH_CLUSTER_WINDOW s, limit OVR_BENCH_LIMIT on /, empty_gif, the
# writable API at /api.
override_gateway_body() {
    cat <<EOF
    rate_limit_window_zone \$http_x_key zone=o:$((BENCH_OVR_KEYS * 96 / 1000000 + 16))m window=${BENCH_CLUSTER_WINDOW}s $(sync_params);
    server {
        listen 127.0.0.1:$PORT reuseport;
        location / { rate_limit_window zone=o limit=$OVR_BENCH_LIMIT; empty_gif; }
        location = /api { rate_limit_window_metrics write=on; }
    }
}
EOF
}

# cluster_override: 3 gateways; wrk sends BENCH_OVR_KEYS cold clients to
# gateway 1 for four phases of one window each; one client ("low") sends
# 10 requests/s round-robin across the gateways throughout. Phase 1: no
# override; phase 2: {"limit":1} on "low" (PUT on gateway 1 at its start);
# phases 3 and 4: the windows after its removal (DELETE at the start of
# phase 3). Redis commands per gateway and second from INFO commandstats at
# each phase's ends; rows in CLUSTER_OVR_MD.
cluster_override() {
    local secs=$BENCH_CLUSTER_WINDOW phases=4 ports out=$RESULTS/cluster-override.tsv
    log "cluster: 3 gateways, $BENCH_OVR_KEYS cold clients, one {\"limit\":1} override set then removed"
    launch_gateways 3 override_gateway_body
    redis-cli -p "$REDIS_PORT" flushall >/dev/null
    ports=$(IFS=,; echo "${GATEWAY_PORTS[*]}")
    # Start at a window boundary, after a second of warm-up.
    while [ $(($(date +%s) % secs)) -ne $((secs - 1)) ]; do sleep 0.2; done
    wrk -t2 -c16 -d"$((secs * phases + 1))s" -s "$BENCH_DIR/keys.lua" "http://127.0.0.1:${GATEWAY_PORTS[0]}/" \
        -- "$BENCH_OVR_KEYS" 0 2 >"$RESULTS/cluster-override-wrk.txt" &
    local wrk_pid=$!
    sleep 1
    python3 - "$ports" "$REDIS_PORT" "$secs" "$phases" >"$out" <<'PY'
import http.client, subprocess, sys, time
ports = [int(p) for p in sys.argv[1].split(",")]
redis, secs, phases = sys.argv[2], float(sys.argv[3]), int(sys.argv[4])

def calls():
    out = subprocess.run(["redis-cli", "-p", redis, "info", "commandstats"],
                         capture_output=True, text=True).stdout
    # cmdstat_hset:calls=12,usec=…
    return sum(int(f.split("=")[1]) for l in out.splitlines() if l.startswith("cmdstat_")
               for f in l.strip().split(":", 1)[1].split(",") if f.startswith("calls="))

def api(method, body=None):
    c = http.client.HTTPConnection("127.0.0.1", ports[0], timeout=10)
    path = "/api?zone=o&key=low" + ("" if method == "PUT" else "&override")
    c.request(method, path, body=body)
    r = c.getresponse(); r.read()
    assert r.status == 200, (method, r.status)

conns = [http.client.HTTPConnection("127.0.0.1", p, timeout=10) for p in ports]
names = ["no override", "{\"limit\":1} on one client", "1st window after its removal",
         "2nd window after its removal"]
print("# phase name secs calls_per_gateway_per_s low_sent low_admitted")
i = 0
for ph in range(phases):
    if ph == 1:
        api("PUT", b'{"limit":1}')
    if ph == 2:
        api("DELETE")
    c0, t0 = calls(), time.time()
    sent = ok = 0
    while time.time() < t0 + secs:
        c = conns[i % len(ports)]
        c.request("GET", "/", headers={"X-Key": "low"})
        r = c.getresponse(); r.read()
        sent += 1; ok += r.status == 200; i += 1
        time.sleep(0.1)
    c1, t1 = calls(), time.time()
    print(f"{ph + 1}\t{names[ph]}\t{t1 - t0:.1f}\t{(c1 - c0) / (t1 - t0) / len(ports):.1f}\t{sent}\t{ok}")
PY
    wait "$wrk_pid" || true
    local m=$RESULTS/cluster-override-metrics.txt
    curl -s "http://127.0.0.1:${GATEWAY_PORTS[0]}/api" >"$m"
    stop_gateways
    CLUSTER_OVR_MD="| phase (one window of ${secs} s each) | Redis commands/s per gateway | \"low\" admitted / sent (limit $OVR_BENCH_LIMIT; 1 under the override) |
|---|---:|---:|
$(awk -F'\t' '!/^#/ {printf "| %s. %s | %s | %s / %s |\n", $1, $2, $4, $6, $5}' "$out")

wrk: $(awk '/requests in/ {print $1 " requests in " $4}' "$RESULTS/cluster-override-wrk.txt" | tr -d ',') to gateway 1, cycling through $BENCH_OVR_KEYS keys."
}

# ---------------------------------------------------------------- fleet_overrides

FLEET_OVR_FIELDS=${FLEET_OVR_FIELDS:-1000000}
FLEET_OVR_SECS=10

# redis_calls: the commands the bench's redis-server ran so far (INFO
# commandstats; a script's own commands included).
redis_calls() {
    redis-cli -p "$REDIS_PORT" info commandstats | awk -F'[=,:]' '/^cmdstat_/ {n += $3} END {print n + 0}'
}

# fleet_ignored PORT: values of zone o the gateway on PORT read and ignored.
fleet_ignored() {
    curl -s "http://127.0.0.1:$1/api" |
        awk '/^rate_limit_window_fleet_values_ignored_total\{zone="o"\}/ {print $2}'
}

# per_gateway_rate CALLS0 CALLS1 SECS: commands per second and gateway (3).
per_gateway_rate() {
    python3 -c "print(f'{($2 - $1) / $3 / 3:.1f}')"
}

# bench_fleet_overrides: three gateways (zone o, sync=100ms, no traffic):
# Redis commands per second and gateway over FLEET_OVR_SECS s with an empty
# overrides' hash; then, the gateways started again after FLEET_OVR_FIELDS
# fields were put in the hash (none with this fleet's MAC: each is read,
# checked and counted), the commands per second while every gateway reads
# them in pages, the time from their start until the last one has, and the
# commands per second after; then 1,000 changes in about a second spread
# over the gateways, and the time until every gateway holds them.
bench_fleet_overrides() {
    command -v redis-server >/dev/null || { FLEET_OVR_MD="_Skipped: redis-server is not installed._"; log "fleet_overrides: no redis-server; skipped"; return; }
    log "== fleet_overrides: 3 gateways, an empty overrides' hash vs $FLEET_OVR_FIELDS fields"
    start_redis
    launch_gateways 3 override_gateway_body
    sleep 2
    local c0 c1 t0 t1 none reading after read_s p done=0
    c0=$(redis_calls); sleep "$FLEET_OVR_SECS"; c1=$(redis_calls)
    none=$(per_gateway_rate "$c0" "$c1" "$FLEET_OVR_SECS")
    # The fields are not changes of the log: gateways started after read
    # them from the snapshot, as a new gateway does.
    stop_gateways
    redis-cli -p "$REDIS_PORT" EVAL "for i = 1, tonumber(ARGV[1]) do redis.call('HSET', KEYS[1], \
string.format('%014x', i), 'v3 ' .. i .. ' e 0000000000000001.1 ban 0 0 ' .. string.rep('0', 32)) end \
return 1" 1 'rlw:{o}:ovr3' "$FLEET_OVR_FIELDS" >/dev/null
    c0=$(redis_calls); t0=$(date +%s.%N)
    launch_gateways 3 override_gateway_body
    for _ in $(seq 1 600); do
        done=1
        for p in "${GATEWAY_PORTS[@]}"; do
            [ "$(fleet_ignored "$p" | cut -d. -f1)" -ge "$FLEET_OVR_FIELDS" ] 2>/dev/null || done=0
        done
        [ "$done" = 1 ] && break
        sleep 0.5
    done
    c1=$(redis_calls); t1=$(date +%s.%N)
    [ "$done" = 1 ] || log "fleet_overrides: not every gateway read the $FLEET_OVR_FIELDS fields in 300 s"
    read_s=$(python3 -c "print(f'{$t1 - $t0:.1f}')")
    reading=$(per_gateway_rate "$c0" "$c1" "$read_s")
    c0=$(redis_calls); sleep "$FLEET_OVR_SECS"; c1=$(redis_calls)
    after=$(per_gateway_rate "$c0" "$c1" "$FLEET_OVR_SECS")
    # A thousand changes in about a second, spread over the gateways, and
    # the time until every gateway holds them all.
    python3 - "$(IFS=,; echo "${GATEWAY_PORTS[*]}")" >"$RESULTS/fleet-changes.txt" <<'PY'
import http.client, json, sys, time
ports = [int(p) for p in sys.argv[1].split(",")]
conns = [http.client.HTTPConnection("127.0.0.1", p, timeout=10) for p in ports]
n, t0 = 1000, time.time()
for i in range(n):
    c = conns[i % len(conns)]
    c.request("PUT", f"/api?zone=o&key=change{i}", body=f'{{"limit":{i + 1}}}')
    r = c.getresponse(); r.read()
    assert r.status == 200, r.status
    time.sleep(max(0.0, t0 + (i + 1) / n - time.time()))
t1 = time.time()
def live(p):
    c = http.client.HTTPConnection("127.0.0.1", p, timeout=10)
    c.request("GET", "/api?zone=o&overrides&count=1")
    return json.loads(c.getresponse().read())["live"]
while any(live(p) < n for p in ports) and time.time() < t1 + 60:
    time.sleep(0.05)
t2 = time.time()
print(f"{n}\t{t1 - t0:.2f}\t{t2 - t1:.2f}\t{int(all(live(p) >= n for p in ports))}")
PY
    read -r FLEET_CHANGES FLEET_CHANGES_S FLEET_CHANGES_WAIT FLEET_CHANGES_OK <"$RESULTS/fleet-changes.txt"
    stop_gateways
    stop_redis
    log "fleet_overrides: $none commands/s per gateway with none, $reading while reading $FLEET_OVR_FIELDS ($read_s s), $after after; $FLEET_CHANGES changes in $FLEET_CHANGES_S s, all gateways had them $FLEET_CHANGES_WAIT s later"
    FLEET_OVR_MD="| overrides' hash | Redis commands/s per gateway |
|---|---:|
| empty | $none |
| $FLEET_OVR_FIELDS fields, while the 3 gateways read them ($read_s s until the last had$([ "$done" = 1 ] || echo " not")) | $reading |
| $FLEET_OVR_FIELDS fields, after | $after |

$FLEET_CHANGES changes (\`{\"limit\":N}\` on as many clients) sent in $FLEET_CHANGES_S s round-robin to the
3 gateways: every gateway held all of them $FLEET_CHANGES_WAIT s after the last$([ "$FLEET_CHANGES_OK" = 1 ] || echo " (not within 60 s)")."
}

# ---------------------------------------------------------------- cluster_scale

SCALE_LIMIT=100

# start_scale_gateways G N: G gateways with one zone `s` sized for N
# clients, limit SCALE_LIMIT per minute on /, empty_gif.
start_scale_gateways() {
    SCALE_MB=$(($2 * 96 / 1000000 + 16))
    launch_gateways "$1" scale_gateway_body
}

# scale_gateway_body: the http block's body of one start_scale_gateways
# gateway (on $PORT, a zone of SCALE_MB MB).
scale_gateway_body() {
    cat <<EOF
    rate_limit_window_zone \$http_x_key zone=s:${SCALE_MB}m window=1m $(sync_params);
    server {
        listen 127.0.0.1:$PORT reuseport;
        location / { rate_limit_window zone=s limit=$SCALE_LIMIT; empty_gif; }
        location = /metrics { rate_limit_window_metrics; }
    }
}
EOF
}

# sync_cpu_ticks MASTER_PID: utime + stime (clock ticks) of the rlw-sync
# thread among MASTER_PID's workers.
sync_cpu_ticks() {
    local w t
    for w in $(pgrep -P "$1"); do
        for t in /proc/"$w"/task/*; do
            if grep -q '^rlw-sync' "$t/comm" 2>/dev/null; then
                awk '{print $14 + $15}' "$t/stat"
                return
            fi
        done
    done
    echo 0
}

# metric_of FILE NAME: the value of sample NAME{zone="s"} in a saved /metrics.
metric_of() {
    awk -v s="$2{zone=\"s\"}" '$1 == s {print $2}' "$1"
}

# scale_run G N: one run; appends a row to CLUSTER_SCALE_ROWS.
scale_run() {
    local g=$1 n=$2 secs=$BENCH_SCALE_SECS i ports cpu0=() cpu1=() hot
    log "cluster_scale: $g gateway(s), $n cold clients, ${secs}s"
    start_scale_gateways "$g" "$n"
    redis-cli -p "$REDIS_PORT" flushall >/dev/null
    sleep 1
    # The whole run inside one window of 1 min, so that the hot client's
    # admissions compare with its limit (a boundary would let more through).
    while [ $(($(date +%s) % 60)) -gt $((57 - secs)) ]; do sleep 0.2; done
    redis-cli -p "$REDIS_PORT" config resetstat >/dev/null
    for i in $(seq 0 $((g - 1))); do cpu0+=("$(sync_cpu_ticks "${GATEWAY_PIDS[$i]}")"); done
    ports=$(IFS=,; echo "${GATEWAY_PORTS[*]}")
    wrk -t2 -c16 -d"${secs}s" -s "$BENCH_DIR/keys.lua" "http://127.0.0.1:${GATEWAY_PORTS[0]}/" \
        -- "$n" 0 2 >"$RESULTS/scale-$g-$n-wrk.txt" &
    local wrk_pid=$!
    hot=$(python3 - "$ports" "$secs" <<'PY'
import http.client, sys, time
ports = [int(p) for p in sys.argv[1].split(",")]
end = time.time() + float(sys.argv[2]) - 1
conns = [http.client.HTTPConnection("127.0.0.1", p, timeout=10) for p in ports]
sent = ok = i = 0
while time.time() < end:
    c = conns[i % len(ports)]
    c.request("GET", "/", headers={"X-Key": "hot"})
    r = c.getresponse(); r.read()
    sent += 1; ok += r.status == 200; i += 1
    time.sleep(0.05)
print(ok, sent)
PY
)
    wait "$wrk_pid"
    for i in $(seq 0 $((g - 1))); do cpu1+=("$(sync_cpu_ticks "${GATEWAY_PIDS[$i]}")"); done
    curl -s "http://127.0.0.1:${GATEWAY_PORTS[0]}/metrics" >"$RESULTS/scale-$g-$n-metrics.txt"
    redis-cli -p "$REDIS_PORT" info commandstats >"$RESULTS/scale-$g-$n-cmdstats.txt"
    redis-cli -p "$REDIS_PORT" info stats >"$RESULTS/scale-$g-$n-stats.txt"
    stop_gateways
    local reqs calls inb outb p99 lag cpu=0 hz m=$RESULTS/scale-$g-$n-metrics.txt
    reqs=$(awk '/requests in/ {print $1}' "$RESULTS/scale-$g-$n-wrk.txt")
    calls=$(grep -o 'calls=[0-9]*' "$RESULTS/scale-$g-$n-cmdstats.txt" | cut -d= -f2 | awk '{s += $1} END {print s + 0}')
    inb=$(tr -d '\r' <"$RESULTS/scale-$g-$n-stats.txt" | awk -F: '/^total_net_input_bytes/ {print $2 + 0}')
    outb=$(tr -d '\r' <"$RESULTS/scale-$g-$n-stats.txt" | awk -F: '/^total_net_output_bytes/ {print $2 + 0}')
    p99=$(metric_of "$m" rate_limit_window_sync_round_p99_seconds)
    lag=$(metric_of "$m" rate_limit_window_sync_lag_seconds)
    hz=$(getconf CLK_TCK)
    for i in $(seq 0 $((g - 1))); do cpu=$((cpu + ${cpu1[$i]} - ${cpu0[$i]})); done
    CLUSTER_SCALE_ROWS+=$(awk -v g="$g" -v n="$n" -v r="${reqs:-0}" -v c="${calls:-0}" -v i="${inb:-0}" -v o="${outb:-0}" \
        -v s="$secs" -v p="${p99:--1}" -v l="${lag:--1}" -v h="$hot" -v cpu="$cpu" -v hz="$hz" -v lim="$SCALE_LIMIT" 'BEGIN {
        split(h, hh, " "); d = r; if (d > n) d = n
        printf "| %d | %d | %d | %.0f | %.0f | %.3f | %.3f | %d of %d (limit %d) | %.1f%% |\n",
            g, n, d, c / s / g, (i + o) / s / g, p, l, hh[1], hh[2], lim, 100 * cpu / hz / s / g }')$'\n'
}

bench_cluster_scale() {
    command -v redis-server >/dev/null || { CLUSTER_SCALE_MD="_Skipped: redis-server is not installed._"; return; }
    log "== cluster_scale: gateways $BENCH_SCALE_GATEWAYS x cold clients $BENCH_SCALE_KEYS"
    start_redis
    CLUSTER_SCALE_ROWS=""
    local g n
    for g in $BENCH_SCALE_GATEWAYS; do
        for n in $BENCH_SCALE_KEYS; do
            scale_run "$g" "$n"
        done
    done
    stop_redis
    CLUSTER_SCALE_MD="| gateways | N | clients | Redis commands/s per gateway | Redis bytes/s per gateway | round p99 (s) | lag (s) | hot client admitted | sync thread CPU per gateway |
|---|---|---|---|---|---|---|---|---|
$CLUSTER_SCALE_ROWS"
}

# ---------------------------------------------------------------- scaling

# Worker counts for the scaling section: powers of two below nproc, then nproc.
default_scale_workers() {
    local n w=1 out=""
    n=$(nproc)
    while [ $w -lt "$n" ]; do
        out+="$w "
        w=$((w * 2))
    done
    echo "$out$n"
}

# The throughput nginx (same servers, locations and zones) started once per
# worker count; hot and 1M-client scenarios, the three variants alternated
# as in bench_throughput, BENCH_SCALE_REPS reps. wrk keeps the same number
# of threads for every count and opens BENCH_SCALE_CONNS connections per
# worker.
bench_scaling() {
    local list=${BENCH_SCALE_WORKERS:-$(default_scale_workers)}
    local quarter=$(($(nproc) / 4))
    local threads=${BENCH_SCALE_THREADS:-$((quarter > 2 ? quarter : 2))}
    [ "$threads" -ge 1 ] || threads=1
    log "== scaling: workers $list; wrk -t$threads, $BENCH_SCALE_CONNS connections per worker; $BENCH_SCALE_REPS reps x ${BENCH_SECS}s"
    local tsv=$RESULTS/scaling.tsv saved_t=$BENCH_THREADS saved_c=$BENCH_CONNS
    local w scen got
    echo "# scenario workers rep variant rps requests non2xx p99ms sockerr idlepct" >"$tsv"
    BENCH_THREADS=$threads
    for w in $list; do
        WORKERS=$w start_throughput_nginx
        got=$(pgrep -P "$NGINX_PID" | wc -l)
        [ "$got" -eq "$w" ] || die "scaling: nginx runs $got worker processes, expected $w"
        BENCH_CONNS=$((BENCH_SCALE_CONNS * w))
        [ "$BENCH_CONNS" -ge "$threads" ] || BENCH_CONNS=$threads
        for scen in hot many; do
            alternate_reps "$scen" "$BENCH_SCALE_REPS" "w$w-" "$tsv" "$scen $w" \
                "scaling $w workers, $scen" none rlw lr
        done
        stop_nginx
    done
    BENCH_THREADS=$saved_t
    BENCH_CONNS=$saved_c
    SCALING_LIST=$list
    SCALING_WRK="-t$threads -c$BENCH_SCALE_CONNS×workers"
    SCALING_MD=$(python3 "$BENCH_DIR/report.py" scaling "$tsv")
}

# ---------------------------------------------------------------- report

machine_md() {
    local cpu cores mem kernel rev
    cpu=$(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo)
    cores=$(nproc)
    mem=$(awk '/^MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo)
    kernel=$(uname -r)
    rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
    if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then rev+=" (with uncommitted changes)"; fi
    cat <<EOF
| | |
|---|---|
| date | $(date -u '+%Y-%m-%d %H:%M UTC') |
| CPU | ${cpu:-unknown}, $cores cores (nproc) |
| memory | $mem |
| kernel | $kernel |
| nginx | $NGINX_VERSION (target/dist/nginx, the binary the module was built against) |
| wrk | $(wrk --version 2>&1 | head -n1 | awk '{print $2}') |
| commit | $rev |
| load average at start | $LOAD_AT_START |
| settings | BENCH_SECS=$BENCH_SECS BENCH_REPS=$BENCH_REPS BENCH_WARMUP=$BENCH_WARMUP BENCH_CONNS=$BENCH_CONNS BENCH_THREADS=$BENCH_THREADS BENCH_QUICK=$BENCH_QUICK |
| total runtime | $(( $(date +%s) - START_TS )) s |
EOF
}

write_report() {
    local tmp=$BENCH_OUT.tmp
    ALONE_NOTE=""
    [ -z "$RLW_BENCH_ONLY" ] || ALONE_NOTE="$(alone_note)"$'\n\n'
    {
        echo "# Benchmarks"
        echo
        echo "Generated by \`make bench\` (scripts/bench.sh); do not edit by hand."
        echo "Every comparison below is a ratio of runs made side by side, in one"
        echo "run of the script on the machine below; absolute numbers depend on"
        echo "that machine and are given only for context."
        echo
        echo "## Machine"
        echo
        machine_md
        echo
        if section_on throughput; then
            cat <<EOF
## Throughput

${ALONE_NOTE}One nginx (2 workers, \`reuseport\`, \`access_log off\`) serves \`empty_gif\`
from three servers (ports), one per variant: no limiter, this module, and
stock \`limit_req\`, both limiters keyed on \`\$http_x_key\`. Each server has
the same locations (\`/hot\`, \`/many\`, \`/rej\`), so every variant is sent
the same requests and pays the same location lookup. wrk
(\`-t$BENCH_THREADS -c$BENCH_CONNS\`, keep-alive, ${BENCH_SECS} s per run) runs the variants
alternately, rotating which goes first in each rep, after a ${BENCH_WARMUP} s unrecorded
warm-up of each; $BENCH_REPS reps. A ratio is computed per rep from its
adjacent runs; the table gives the median and the range of those ratios.
wrk and nginx share the same $(nproc) cores, so wrk's own CPU use is part of
every number and differences between variants are diluted accordingly. In
the 1M-client scenario each wrk thread cycles through its own slice of the
keys. On the 2-core VM this benchmark was developed on, two wrk threads and
two workers kept both cores busy (under 1% idle in /proc/stat); runs there
before commit 9737615 used one wrk thread, which left 15–21% of the machine
idle and under which this module measured lower against no limiter (see
[docs/performance.md](docs/performance.md#one-wrk-thread-or-two)). The last column of each table below
is the share of the machine's CPU time left idle during the runs
(\`/proc/stat\`); near 0 means the cores were saturated.

* Admit-everything locations: this module \`limit=1000000\` per \`window=1s\`
  (hot) or per \`window=1m\` (1M keys, 32m zone); limit_req
  \`rate=10000000r/s burst=1000000 nodelay\` (1m and 256m zones). Every run
  is checked to have had no non-2xx response.
* Reject-everything locations: one key over its limit (this module
  \`limit=1 window=1h\`, limit_req \`rate=1r/m\`, both primed with one request
  and returning 429, rejections logged at \`info\`, below the error_log level).
  Every response is checked to be a rejection.
* The module runs with its default \`rate_limit_window_headers on\` (it adds
  RateLimit-* headers to each response; limit_req adds none).

Targets from the issue are printed for reference; they are not claims.

$THROUGHPUT_MD

EOF
        fi
        if section_on modes; then
            cat <<EOF
## Strict vs estimate mode

${ALONE_NOTE}One nginx (2 workers) with, per scenario, a \`mode=estimate\` zone and a
\`mode=strict\` zone of the same limit (\`limit=65535\`, strict's largest)
and window, keyed on the same \`X-Key\` header and sent the same keys
(bench/keys.lua): 16 keys in a \`window=1s\` zone (one strict key is capped
at 65,535 requests per second, 6/7 of that under saturation, below what one
key gets here, so 16 keys stand in for a hot client) and 10,000 keys in a
\`window=1m\` zone. Every request is admitted (checked: no non-2xx). wrk
\`-t$BENCH_THREADS -c$BENCH_CONNS\` on the same shared $(nproc)-core machine as nginx;
${BENCH_WARMUP} s warm-up of each mode, then $BENCH_MODES_REPS reps of ${BENCH_SECS} s per mode,
alternated (the first mode rotating); the ratio is strict / estimate per
rep, its median, 95% CI and min–max.

$MODES_MD

EOF
        fi
        if section_on capacity; then
            cat <<EOF
## Capacity: clients remembered per MB

${ALONE_NOTE}One 1 MB zone per limiter and N. N distinct keys are sent once each (all
admitted), then again newest first; a key whose second request is rejected
was still remembered. This module: \`limit=1 window=1h\`; limit_req:
\`rate=1r/m\`, no burst (both passes finish well within the minute). One
keep-alive connection, requests in order (pipelined in batches of 128).

Past capacity the second pass under-counts for this module: a forgotten
key's second request is admitted and stored, and may evict a remembered
key that the walk has not reached yet, which then counts as forgotten (the
module's victim choice is an approximate LRU whose outcome depends on where
in the window the run falls); limit_req's strict LRU evicts only keys the
walk has already passed. The headline is therefore the
maximum over N, as for limit_req. "slots used" is the module's own
\`rate_limit_window_slots_used\` metric read between the two passes, a count
that the second pass cannot disturb.

$CAPACITY_MD

EOF
        fi
        if section_on accuracy; then
            cat <<EOF
## Accuracy (core)

${ALONE_NOTE}Output of \`cargo bench -p rate_limit_window_bench --bench accuracy\`
(fixed seeds: the same numbers on every run). Each request of a trace
is decided by the module's table and judged two ways against an exact
sliding log (at most \`limit\` admitted in any \`W\`-long span):
\`independent\`, where the log decides every request on its own admitted
history, and \`shared_history\` (the measure Cloudflare published for its
sliding-window counter, 0.003% of 400M requests), where each decision is
compared with what the exact rule says given what the table actually
admitted. The traces and every column are described at the top of
\`bench/benches/accuracy.rs\`. Where \`well_behaved_wrong\` is 0, every
wrong decision is an abuser's, where the counter's assumption that the
previous window's requests were spread evenly does not hold.

The second table is per mode (\`mode=estimate\`, \`mode=strict\`) under
saturation: one client sending Poisson traffic at 1×, 3× and 10× its
limit (\`limit=10\` per 10 s window, 2,000 windows, fixed seeds), decided by
the table's \`acquire\`. \`worst\` is the most requests admitted in any
interval of one window (exact sliding log over the admitted times);
\`mean_per_window\` is admitted / windows and \`mean_x_limit\` that over
the limit. [docs/algorithm.md](docs/algorithm.md) explains both guarantees.

$ACCURACY_MD

EOF
        fi
        if section_on micro; then
            cat <<EOF
## Core micro-benchmarks

${ALONE_NOTE}\`cargo bench -p rate_limit_window_bench --bench decision\`$([ "$BENCH_QUICK" = 1 ] && echo " with \`--warm-up-time 0.5 --measurement-time 1\` (BENCH_QUICK=1)") (criterion; low/mid/high are
the bounds and point estimate of its confidence interval).

$MICRO_MD

EOF
        fi
        if section_on overrides; then
            cat <<EOF
## Override lookups

${ALONE_NOTE}\`cargo bench -p rate_limit_window_bench --bench overrides\`$([ "$BENCH_QUICK" = 1 ] && echo " with \`--warm-up-time 0.5 --measurement-time 1\` (BENCH_QUICK=1)"): the lookup every request of a zone holding
at least one override makes, in a table holding one live override, fresh
and after 1,000,000 overrides with a ttl of 1 s came and went (set a quarter
of the capacity at a time, each batch expired before the next), 4,096
distinct clients looked up in turn: first both tables timed in alternating
batches (so that other work on the machine slows both alike: the ratio to
judge), then criterion on each alone; then the range lookup of an address
(\`cidr=\`) by the number of ranges and of prefix lengths in use
([docs/runtime-control.md](docs/runtime-control.md)).

$OVERRIDES_MD

EOF
        fi
        if section_on override_history; then
            cat <<EOF
## Override lookups end to end: a hot client after $BENCH_HIST_N expired overrides

${ALONE_NOTE}One nginx (2 workers), zone \`h\` with \`overrides=$BENCH_HIST_CAP\` holding one live
override of another client (so every request of the hot client looks the
table up); wrk (\`-t$BENCH_THREADS -c$BENCH_CONNS\`, ${BENCH_SECS} s a run, header \`X-Key: hot\`, always
admitted) runs $BENCH_HIST_REPS times, then $BENCH_HIST_N overrides with a ttl of 1 s are set
through the API (python, one keep-alive connection) and left to expire,
then wrk runs $BENCH_HIST_REPS times again. The runs cannot be interleaved (the
history cannot be undone): compare the medians, with wrk's ±5% between
runs in mind.

$HISTORY_MD

EOF
        fi
        if section_on callgrind; then
            cat <<EOF
## Instructions per request (callgrind)

${ALONE_NOTE}nginx as one process (\`master_process off\`) under \`valgrind --tool=callgrind\`,
one keep-alive client sending requests one at a time to \`location = /t\`,
whose only directives are the variant's limiter (so every variant has the
same URI and the same location lookup). Each variant is run twice, with 200 and $((200 + BENCH_CG_REQS)) requests; instructions per request are the
difference of the two totals divided by $BENCH_CG_REQS, so start-up and shutdown
cancel out. The module's sweep of idle slots (a timer, once a second,
not per request) is left out of the counts (\`--toggle-collect\` on its
handler): its share per request would depend on how long valgrind takes.
"A new key per request" inserts a new key every time; "headers
off" is \`rate_limit_window_headers off\` (the other module rows use the
default, on). The \`in_flight=\` rows (\`in_flight=1000\`, never reached:
one request at a time) take and give back a place per request, beside
\`limit_conn\` (\`limit_conn Z 1000\`, the same bound) and
\`rate_limit_window_shed zone=cap max=1000\` (docs/in-flight.md,
docs/shedding.md). These are instruction counts, not time (no contention
between workers), but unlike req/s they barely move on a busy machine
(well under 1% between runs). The L1i column is callgrind's cache
simulation (\`--cache-sim=yes\`, a first-level instruction cache sized
like this machine's) of the code lines fetched from outside that cache per
request: nginx alone already overflows it, so every line of code a limiter
adds costs its own miss and may evict one of nginx's. No kernel code is
simulated, and a real core prefetches part of these misses away, so they
are an indication of code footprint, not a time. The D1 and LL columns are
the same simulation's data misses (reads and writes) in the first-level
data cache and the last level, with the caches' sizes fixed in bench.sh
(\`$CG_CACHES\`) rather than detected: the lines of memory a request
touches that were not in that cache. A new client's table lines show in the
D1 column (each was last touched by other clients); the zones here (4 MiB
for this module's new keys, zeroed when nginx starts, 8 MiB for limit_req's)
fit in the simulated LL, so only memory touched for the first time (a
limit_req node never allocated before) misses there.

$CALLGRIND_MD

### Where a request's instructions and data misses go

Per request, over no limiter, by the source file of the code
(\`callgrind_annotate\`'s file:function lines, inlined code counted in the
file it comes from; the standard library's code inlined into a function
counted with that function's part): the key's evaluation (nginx's
variable, or the module's own read of a \`\$http_NAME\` header), its hash, the table (slot search, placement and the window
rule: \`core/src/table\`, \`core/src/rule\`), the engine, the
decision's record, the response headers (this module's filter and the
lines nginx's header filter writes for them), the rest of the module's
glue (the phase handler), and nginx and libc otherwise.

$CALLGRIND_SPLIT_MD

### Data lines a request touches (footprint)

The D1 column above counts conflict misses too: with 8 ways, a cache set
that more than 8 of a request's lines map to misses on every one of them,
every request, and which sets those are depends on where nginx, the
libraries and the zones happen to lie in memory (it moves with any change
of the binary, and nginx alone sits near that edge). The same runs with a
64-way D1 (\`$CG_CACHES_FOOTPRINT\`) leave only the lines a request
touches that it did not touch recently: for a new client, the memory of
its slot or node (a limiter's footprint, a property of the design).

$CALLGRIND_FP_MD

EOF
        fi
        if section_on stream_callgrind; then
            cat <<EOF
## Instructions per TCP connection (stream, callgrind)

${ALONE_NOTE}nginx as one process under \`valgrind --tool=callgrind\` (the caches of
the section above), a \`stream\` server that answers each TCP connection
with one byte (\`return "x";\`) and closes it; one client opens the
connections one after another, from one address (\`127.0.0.1\`, the key
\`\$binary_remote_addr\`: one hot client). Each variant runs with 100 and
$((100 + BENCH_SCG_CONNS)) connections; per connection is the difference divided by
$BENCH_SCG_CONNS. \`stream_none\`: no limiter (accept, \`return\`, close);
\`stream_rlw\`: \`rate_limit_window zone=rlw limit=1000000;\`;
\`stream_rlw_in_flight\`: the same with \`in_flight=1000\`;
\`stream_in_flight\`: \`in_flight=1000\` alone; \`stream_lc\`: nginx's
\`limit_conn lc 1000;\`. A limiter's cost is its row minus \`stream_none\`'s.

$STREAM_CG_MD

EOF
        fi
        if section_on hugepages; then
            cat <<EOF
## 1M clients with the table on huge pages

${ALONE_NOTE}The module advises transparent huge pages for its tables
(\`madvise(MADV_HUGEPAGE)\`); Linux takes the advice only when
\`/sys/kernel/mm/transparent_hugepage/shmem_enabled\` allows it, and the
throughput section above ran with this machine's setting. Here two copies
of the throughput nginx run side by side: one started with \`never\` (4 KB
pages), one with \`advise\` (2 MB pages for the advised tables only;
\`limit_req\`'s zones and all other memory keep 4 KB pages); the setting
is restored right after. wrk cycles through the same 1M keys as above,
alternating no limiter (first nginx), the module with its table on 4 KB
pages (first nginx) and on huge pages (second nginx): $BENCH_REPS reps of
${BENCH_SECS} s, ratios per rep, as above.

$HUGEPAGES_MD

EOF
        fi
        if section_on abusers; then
            cat <<EOF
## Under a flood: abusers kept per MB

${ALONE_NOTE}One 1 MB zone per limiter and N. N abusers (\`X-Key\` a0 … a(N-1)) each
send two requests over a limit of 1 (this module: \`limit=1 window=1h\`;
limit_req: \`rate=1r/m\`, no burst): one admitted, one refused. Then
$BENCH_FLOOD_KEYS new clients (wrk, bench/keys.lua, a new \`X-Key\` per request) go
through the same location, and each abuser sends once more: "still
refused" counts the abusers the limiter still remembers at their limit (a
forgotten one is admitted with a fresh limit). limit_req's check comes
within a minute of its priming (rate=1r/m).

$ABUSERS_MD

EOF
        fi
        if section_on delayq; then
            cat <<EOF
## Delay queue: holds per admission

${ALONE_NOTE}One nginx worker, \`rate_limit_window zone=q limit=2 delay=10s
delay_max_held=20\` in a \`window=2s\` zone, \`empty_gif\`. $BENCH_DELAY_BURST requests of one
client (\`X-Key: one\`) sent at once (curl, one connection each). A held
request waits for its own turn behind its client's held requests; one whose
turn is past \`delay\` is refused at once. "Holds logged" counts the
\`delaying request by\` lines (every hold and re-hold); "held then admitted"
is \`rate_limit_window_delayed_total{result="admitted"}\`.

$DELAYQ_MD

EOF
        fi
        if section_on scaling; then
            cat <<EOF
## Worker scaling

${ALONE_NOTE}The throughput nginx (same three servers, locations and zones) started
once per worker count (\`worker_processes\` $SCALING_LIST) on this
$(nproc)-core machine. For each count, the hot and 1M-client scenarios run
the three variants alternately as above ($BENCH_SCALE_REPS reps of ${BENCH_SECS} s after a
${BENCH_WARMUP} s warm-up of each), with wrk \`$SCALING_WRK\` on the same
machine. wrk keeps the same threads for every count, so where req/s stops
growing with workers the client, or the cores it shares with nginx, may be
the limit rather than nginx. "× 1 worker" is a variant's median req/s over
its own median with one worker; the ratios are medians of per-rep ratios,
as above. A worker count above the core count only shows oversubscription.

$SCALING_MD

EOF
        fi
        if section_on redis; then
            cat <<EOF
## Redis sync on vs off

${ALONE_NOTE}$REDIS_MD

EOF
        fi
        if section_on cluster; then
            cat <<EOF
## Cluster: three gateways sharing one Redis

${ALONE_NOTE}Three nginx gateways (2 workers each) load the module with two zones of
${BENCH_CLUSTER_WINDOW} s windows: \`sync\` shares its counts through one local
redis-server (\`$(REDIS_PORT=PORT sync_params | sed 's/secret=[^ ]*/secret=…/')\`), \`local\`
does not; both limit a client to $BENCH_CLUSTER_LIMIT requests per window.
Three clients send interleaved, evenly paced requests, each at three times
that limit ($((3 * BENCH_CLUSTER_LIMIT)) requests per window), for $BENCH_CLUSTER_WINDOWS windows from a
window boundary: one to the first gateway alone, one round-robin across
the three gateways on the synced zone, one round-robin on the zone without
sync. The README states the bound on over-admission across gateways:
about gateways × the client's request rate × (sync interval + Redis round
trip).

$CLUSTER_MD

### One low override among 1,000,000 cold clients

The same three gateways' setup with one zone \`o\` (limit $OVR_BENCH_LIMIT per
${BENCH_CLUSTER_WINDOW} s window, \`sync=100ms\`): wrk (\`bench/keys.lua\`) sends
$BENCH_OVR_KEYS distinct cold clients to gateway 1 for four windows from a
window boundary, while one client (\`low\`) sends 10 requests/s
round-robin across the gateways. Window 2 has \`{"limit":1}\` on \`low\`
(PUT at its start), removed at the start of window 3. The sync's work
follows the clients near their limit in force: the override makes \`low\`
one, not every client ([docs/gateways.md](docs/gateways.md)). Redis
commands from \`INFO commandstats\` at each window's ends, per gateway.

${CLUSTER_OVR_MD:-_Not run (BENCH_OVR_KEYS=0)._}

EOF
        fi
        if section_on fleet_overrides; then
            cat <<EOF
## Fleet overrides: Redis's load with 1,000,000 fields

${ALONE_NOTE}Three gateways (zone \`o\`, \`sync=100ms\`, no requests) on one
local redis-server: the Redis commands per second and gateway (\`INFO
commandstats\`, a script's own commands included) with an empty overrides'
hash; then, started again after $FLEET_OVR_FIELDS fields were put in it, while
every gateway reads them (the snapshot in pages of 2,000, across rounds;
none with this fleet's MAC, so each is read, checked and counted) and
after: each gateway then reads only the changes after the last one it saw
([docs/gateways.md](docs/gateways.md#overrides-across-the-fleet)).

${FLEET_OVR_MD:-_Not run._}

EOF
        fi
        if section_on cluster_scale; then
            cat <<EOF
## Cluster at scale: cold clients and one hot client

${ALONE_NOTE}G gateways (2 workers each, one zone of 1 min windows, limit
$SCALE_LIMIT, \`sync=100ms\`, one local redis-server). wrk
(\`bench/keys.lua\`) sends N distinct cold clients to gateway 1 for
$BENCH_SCALE_SECS s, inside one window; meanwhile one hot client sends 20
requests/s round-robin across the gateways (the single gateway admits it
exactly its limit: the reference). Redis commands and
bytes (in + out) are from \`INFO commandstats\` / \`INFO stats\` (reset
before each run), per gateway and second; round p99 and lag from the
metrics of gateway 1 at the end; sync CPU is the \`rlw-sync\` thread's user
+ system time over the run, per gateway. "clients" is the distinct cold
clients actually sent (wrk's requests, at most N).

$CLUSTER_SCALE_MD

EOF
        fi
    } >"$tmp"
    if [ -n "$RLW_BENCH_ONLY" ] && [ -f "$BENCH_OUT" ]; then
        python3 "$BENCH_DIR/report.py" splice "$BENCH_OUT" "$tmp" >"$tmp.spliced"
        mv "$tmp.spliced" "$BENCH_OUT"
        rm -f "$tmp"
    else
        mv "$tmp" "$BENCH_OUT"
    fi
}

# alone_note: under RLW_BENCH_ONLY, a paragraph that says when and where the
# section was run, since the machine table is the last full run's.
alone_note() {
    [ -n "$RLW_BENCH_ONLY" ] || return 0
    local rev
    rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
    echo "_Run on its own (\`RLW_BENCH_ONLY=$RLW_BENCH_ONLY\`) on $(date -u '+%Y-%m-%d %H:%M UTC'), commit $rev,"
    echo "on a $(nproc)-core machine shared with other work (load average at start"
    echo "$LOAD_AT_START), so absolute req/s are depressed: compare the ratios. The"
    echo "machine table above is from the last full run._"
}

# ---------------------------------------------------------------- main

LOAD_AT_START=$(cut -d' ' -f1-3 /proc/loadavg)
THROUGHPUT_MD="" CAPACITY_MD="" ACCURACY_MD="" MICRO_MD="" OVERRIDES_MD="" HISTORY_MD="" CALLGRIND_MD="" STREAM_CG_MD="" CALLGRIND_SPLIT_MD="" CALLGRIND_FP_MD="" REDIS_MD="" HUGEPAGES_MD=""
SCALING_MD="" SCALING_WRK="" CLUSTER_MD="" MODES_MD="" ABUSERS_MD="" DELAYQ_MD="" CLUSTER_SCALE_MD="" FLEET_OVR_MD=""
preflight
[ "$BENCH_REPS" -ge 3 ] || log "warning: BENCH_REPS=$BENCH_REPS < 3: fine for trying the script, not for numbers to quote"
section_on throughput && bench_throughput
section_on modes && bench_modes
section_on capacity && bench_capacity
section_on abusers && bench_abusers
section_on delayq && bench_delayq
section_on callgrind && bench_callgrind
section_on stream_callgrind && bench_stream_callgrind
section_on redis && bench_redis
section_on hugepages && bench_hugepages
section_on scaling && bench_scaling
section_on cluster && bench_cluster
section_on fleet_overrides && bench_fleet_overrides
section_on cluster_scale && bench_cluster_scale
section_on accuracy && bench_accuracy
section_on micro && bench_micro
section_on overrides && bench_overrides
section_on override_history && bench_override_history
write_report
log "wrote $BENCH_OUT in $(($(date +%s) - START_TS)) s"
