#!/usr/bin/env python3
"""Parsing and table formatting for scripts/bench.sh.

  report.py wrk FILE           one wrk --latency output -> "rps requests non2xx p99_ms sockerr"
  report.py throughput TSV     throughput results -> markdown
  report.py capacity JSONL     capacity results -> markdown
  report.py callgrind TSV      callgrind totals -> markdown
  report.py callgrind-split DIR SMALL BIG  per-request cost by part (callgrind_annotate) -> markdown
  report.py callgrind-footprint TSV  D1 misses with a 64-way D1 -> markdown
  report.py criterion FILE     criterion stdout -> markdown
  report.py accuracy FILE      accuracy bench stdout -> markdown
  report.py overrides FILE     overrides bench (criterion) stdout -> markdown
  report.py hugepages TSV      1M clients, table on 4 KB vs huge pages -> markdown
  report.py scaling TSV        req/s per worker count -> markdown
  report.py cluster JSON TSV METRICS  admission across gateways and sync on/off -> markdown
  report.py splice OLD NEW     OLD with its "## " sections replaced by NEW's (but Machine)
  report.py selftest           checks the statistics helpers (bench.sh runs it first)
"""
import json
import math
import re
import statistics
import sys

NAMES = {"none": "no limiter", "rlw": "rate_limit_window", "lr": "limit_req"}
SCENARIOS = [
    ("hot", "1 hot client (one key, every request admitted)",
     {"rlw/none": 0.98, "rlw/lr": 1.00}),
    ("many", "1,000,000 distinct clients (wrk cycles X-Key through 1M keys, every request admitted)",
     {"rlw/none": 0.97, "rlw/lr": 1.00}),
    ("rej", "every request rejected (one key over its limit, 429)",
     {}),
]


def unit_ms(v):
    m = re.match(r"([\d.]+)(us|ms|s|m)$", v)
    if not m:
        return float("nan")
    x, u = float(m.group(1)), m.group(2)
    return {"us": x / 1000, "ms": x, "s": x * 1000, "m": x * 60000}[u]


def cmd_wrk(path):
    text = open(path).read()
    rps = re.search(r"^Requests/sec:\s+([\d.]+)", text, re.M)
    req = re.search(r"^\s*(\d+) requests in", text, re.M)
    non = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    p99 = re.search(r"^\s+99%\s+(\S+)", text, re.M)
    se = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    if not rps or not req:
        print("parse-error")
        return
    print(rps.group(1), req.group(1), non.group(1) if non else 0,
          "%.3f" % unit_ms(p99.group(1)) if p99 else "nan",
          sum(int(x) for x in se.groups()) if se else 0)


def fmt_int(x):
    return "{:,.0f}".format(x)


def cmd_throughput(path):
    rows = [l.split() for l in open(path) if l.strip() and not l.startswith("#")]
    # scenario rep variant rps requests non2xx p99ms sockerr [idlepct]
    data = {}
    for r in rows:
        scen, rep, var = r[0], int(r[1]), r[2]
        data.setdefault(scen, {}).setdefault(var, {})[rep] = {
            "rps": float(r[3]), "p99": float(r[6]), "sockerr": int(r[7]),
            "idle": float(r[8]) if len(r) > 8 else None}
    out = []
    for scen, title, targets in SCENARIOS:
        if scen not in data:
            continue
        d = data[scen]
        vars_ = [v for v in ("none", "rlw", "lr") if v in d]
        reps = sorted(set.intersection(*(set(d[v]) for v in vars_)))
        out.append("### %s\n" % title)
        out.append("| variant | req/s (median) | req/s (min–max) | p99 latency (median) | socket errors "
                   "| CPU idle during the runs (median, min–max) |")
        out.append("|---|---:|---:|---:|---:|---:|")
        for v in vars_:
            rps = [d[v][i]["rps"] for i in reps]
            p99 = [d[v][i]["p99"] for i in reps]
            se = sum(d[v][i]["sockerr"] for i in reps)
            idle = [d[v][i]["idle"] for i in reps if d[v][i]["idle"] is not None]
            out.append("| %s | %s | %s–%s | %.2f ms | %d | %s |" % (
                NAMES[v], fmt_int(statistics.median(rps)), fmt_int(min(rps)),
                fmt_int(max(rps)), statistics.median(p99), se,
                "%.1f%% (%.1f–%.1f%%)" % (statistics.median(idle), min(idle), max(idle))
                if idle else "—"))
        out.append("")
        out.append("| ratio | median of per-rep ratios | 95%% CI of the median | min–max over %d reps | target | verdict |"
                   % len(reps))
        out.append("|---|---:|---:|---:|---|---|")
        for num, den in (("rlw", "none"), ("rlw", "lr")):
            if num in d and den in d:
                rs = [d[num][i]["rps"] / d[den][i]["rps"] for i in reps]
                target = targets.get("%s/%s" % (num, den))
                ci = median_ci(rs)
                out.append("| %s / %s | %.3f | %s | %.3f–%.3f | %s | %s |" % (
                    NAMES[num], NAMES[den], statistics.median(rs),
                    "%.3f–%.3f" % ci if ci else "—", min(rs), max(rs),
                    "—" if target is None else "≥ %.2f" % target, verdict(ci, target)))
        out.append("")
    out.append("The confidence interval is distribution-free: the pair of order statistics "
               "of the per-rep ratios that covers the true median with probability ≥ 95% "
               "(binomial, no assumption about the noise). A target is *met* when the whole "
               "interval is at or above it, *missed* when the whole interval is below it, "
               "and *not resolved* when the interval straddles it: this machine's noise "
               "is then larger than the distance to the target.")
    print("\n".join(out))


def median_ci(xs, level=0.95):
    """(low, high) order statistics bracketing the median with probability
    >= level, from the binomial(n, 1/2) distribution of the number of
    samples below it; None when n is too small for the level."""
    xs = sorted(xs)
    n = len(xs)
    best = None
    # P(X(k) <= m <= X(n+1-k)) = 1 - 2 P(Bin(n, 1/2) <= k - 1), k = 1, 2, ...
    tail = 0.0
    for k in range(1, n // 2 + 1):
        tail += math.comb(n, k - 1) / 2.0 ** n
        if 1 - 2 * tail >= level:
            best = (xs[k - 1], xs[n - k])
        else:
            break
    return best


def cmd_selftest():
    # n = 10: X(2) and X(9), coverage 1 - 2 * 11/1024 = 0.979 (X(3), X(8)
    # would cover only 0.891).
    assert median_ci([float(x) for x in range(10, 0, -1)]) == (2.0, 9.0)
    # n = 5 cannot reach 95% (at best 1 - 2/32 = 0.9375); n = 6 can, with the extremes.
    assert median_ci([1, 2, 3, 4, 5]) is None
    assert median_ci([6, 5, 4, 3, 2, 1]) == (1, 6)
    # n = 20: X(6) and X(15), coverage 0.959.
    assert median_ci(list(range(1, 21))) == (6, 15)
    assert verdict((0.99, 1.02), 0.98) == "met"
    assert verdict((0.90, 0.97), 0.98) == "missed"
    assert verdict((0.95, 1.01), 0.98) == "not resolved"
    assert verdict((0.95, 1.01), None) == "—"
    assert verdict(None, 0.98) == "—"
    d = scaling_table([("hot", 2, 1, "rlw", 9.0), ("hot", 1, 1, "rlw", 5.0), ("hot", 2, 2, "rlw", 7.0)])
    assert d == {"hot": {1: {"rlw": {1: 5.0}}, 2: {"rlw": {1: 9.0, 2: 7.0}}}}
    old = "# B\n\n## Machine\nm1\n\n## A\na1\n\n## C\nc1\n"
    new = "# B\n\n## Machine\nm2\n\n## C\nc2\n\n## D\nd2\n"
    assert splice(old, new) == "# B\n\n## Machine\nm1\n\n## A\na1\n\n## C\nc2\n\n## D\nd2\n", splice(old, new)
    print("report.py selftest: ok")


def verdict(ci, target):
    """met / missed / not resolved for a "ratio >= target" goal."""
    if target is None or not ci:
        return "—"
    if ci[0] >= target:
        return "met"
    if ci[1] < target:
        return "missed"
    return "not resolved"


def cmd_capacity(path):
    res = {}
    for l in open(path):
        if l.strip():
            j = json.loads(l)
            res.setdefault(j["variant"], {})[j["n"]] = j
    ns = sorted(set(n for v in res.values() for n in v))
    out = ["| N keys sent | rate_limit_window remembered | rate_limit_window slots used after pass 1 | limit_req remembered |",
           "|---:|---:|---:|---:|"]
    for n in ns:
        cells = []
        for v in ("rlw", "lr"):
            j = res.get(v, {}).get(n)
            if j is None:
                cells.append("—")
            else:
                c = fmt_int(j["remembered"])
                if j["pass1_rejected"]:
                    c += " (%d rejected on first sight)" % j["pass1_rejected"]
                cells.append(c)
            if v == "rlw":
                su = j.get("slots_used") if j else None
                cells.append(fmt_int(su) if su is not None else "—")
        out.append("| %s | %s | %s | %s |" % (fmt_int(n), cells[0], cells[1], cells[2]))
    out.append("")
    best = {v: max((j["remembered"] for j in res.get(v, {}).values()), default=0) for v in ("rlw", "lr")}
    # largest N of the grid at which every key was still remembered
    full = {v: max((n for n, j in res.get(v, {}).items() if j["remembered"] == n), default=0)
            for v in ("rlw", "lr")}
    out.append("| | clients remembered per 1 MB zone (max over N) | every key remembered up to N (of those tried) | expected order |")
    out.append("|---|---:|---:|---|")
    out.append("| rate_limit_window | %s | %s | ~60,000 |" % (fmt_int(best["rlw"]), fmt_int(full["rlw"])))
    out.append("| limit_req | %s | %s | ~8,100 |" % (fmt_int(best["lr"]), fmt_int(full["lr"])))
    if best["lr"]:
        out.append("| ratio | %.1f× | | |" % (best["rlw"] / best["lr"]))
    for v in ("rlw", "lr"):
        ns_v = sorted(res.get(v, {}))
        if ns_v and res[v][ns_v[-1]]["remembered"] >= best[v] and best[v] >= 0.99 * ns_v[-1]:
            out.append("")
            out.append("Note: %s still remembered every key at the largest N (%s): "
                       "its capacity is at least this, raise N." % (NAMES[v], fmt_int(ns_v[-1])))
    print("\n".join(out))


CG_LABELS = {"none": "no limiter", "rlw_hot": "rate_limit_window, 1 hot key",
             "rlw_hot_noheaders": "rate_limit_window, 1 hot key, headers off",
             "cal_hot_noheaders": "rate_limit_window calendar=day tz=America/New_York, 1 hot key, headers off",
             "lr_hot": "limit_req, 1 hot key", "rlw_many": "rate_limit_window, a new key per request",
             "lr_many": "limit_req, a new key per request",
             "strict_hot": "rate_limit_window mode=strict, 1 hot key",
             "strict_many": "rate_limit_window mode=strict, a new key per request",
             "inflight_hot": "rate_limit_window limit= in_flight=, 1 hot key",
             "inflight_alone_hot": "rate_limit_window in_flight= alone, 1 hot key",
             "lc_hot": "limit_conn, 1 hot key",
             "inflight_many": "rate_limit_window limit= in_flight=, a new key per request",
             "lc_many": "limit_conn, a new key per request",
             "shed_hot": "rate_limit_window_shed",
             "stream_none": "stream, no limiter",
             "stream_rlw": "stream, rate_limit_window limit=",
             "stream_rlw_in_flight": "stream, rate_limit_window limit= in_flight=",
             "stream_in_flight": "stream, rate_limit_window in_flight= alone",
             "stream_lc": "stream, limit_conn"}
CG_ORDER = ("none", "rlw_hot", "rlw_hot_noheaders", "cal_hot_noheaders", "lr_hot", "rlw_many", "lr_many",
            "strict_hot", "strict_many", "inflight_hot", "inflight_alone_hot", "lc_hot",
            "inflight_many", "lc_many", "shed_hot",
            "stream_none", "stream_rlw", "stream_rlw_in_flight", "stream_in_flight", "stream_lc")


def cmd_callgrind(path):
    rows = [l.split() for l in open(path) if l.strip() and not l.startswith("#")]
    # variant n_small ir_small i1mr_small d1m_small llm_small n_big ir_big ...
    # (older files: variant n_small ir_small i1mr_small n_big ir_big i1mr_big)
    per = {}
    for r in rows:
        v, nums = r[0], [int(x) for x in r[1:]]
        half = len(nums) // 2
        small, big = nums[:half], nums[half:]
        n = big[0] - small[0]
        per[v] = [(b - a) / n for a, b in zip(small[1:], big[1:])]
    cols = max((len(x) for x in per.values()), default=2)
    names = ["instructions", "L1i misses", "D1 misses", "LL misses"][:cols]
    # The base: no limiter (the stream table's own when it has no http rows).
    base_name = "none" if "none" in per else "stream_none"
    base = per.get(base_name)
    unit = "request" if base_name == "none" else "connection"
    head = "| variant | instructions / %s | over no limiter | ratio to no limiter |" % unit
    head += "".join(" %s / %s (simulated) | over no limiter |" % (m, unit) for m in names[1:])
    out = [head, "|---|" + "---:|" * (3 + 2 * (cols - 1))]
    for v in CG_ORDER:
        if v not in per:
            continue
        x = per[v]
        cells = [CG_LABELS[v]]
        for k in range(cols):
            miss = k > 0
            cells.append(("%.2f" % x[k]) if miss else fmt_int(x[k]))
            if base is None or v == base_name:
                cells.append("—")
            else:
                cells.append(("%+.2f" % (x[k] - base[k])) if miss else fmt_int(x[k] - base[k]))
            if k == 0:
                cells.append("—" if base is None or v == base_name else "%.3f" % (x[0] / base[0]))
        out.append("| " + " | ".join(cells) + " |")
    print("\n".join(out))


def cmd_callgrind_footprint(path):
    rows = [l.split() for l in open(path) if l.strip() and not l.startswith("#")]
    if not rows:
        print("_No footprint runs (BENCH_CG_FOOTPRINT empty)._")
        return
    per = {}
    for r in rows:
        nums = [int(x) for x in r[1:]]
        small, big = nums[:5], nums[5:]
        per[r[0]] = (big[3] - small[3]) / (big[0] - small[0])
    base = per.get("none")
    out = ["| variant | D1 misses / request, 64-way D1 | over no limiter |", "|---|---:|---:|"]
    for v in CG_ORDER:
        if v in per:
            extra = "—" if base is None or v == "none" else "%+.2f" % (per[v] - base)
            out.append("| %s | %.2f | %s |" % (CG_LABELS[v], per[v], extra))
    print("\n".join(out))


# The parts of a request's cost, by the source file callgrind_annotate names
# (the file of inlined code) and, for the standard library's files, the
# function the code was inlined into; first match wins.
CG_PARTS = (
    ("key evaluation", ("ngx_http_variables.c", "ngx_http_script.c", "ffi/vars.rs",
                        "ffi/header_in.rs"), ("header_in::",)),
    ("key hash", ("table/sip.rs",), ()),
    ("table: slot search, placement, rule", ("/table/", "/rule/", "stdarch/"),
     ("rate_limit_window_core::table", "rate_limit_window_core::rule")),
    ("engine", ("/engine/",), ("rate_limit_window_core::engine",)),
    ("record", ("request/record.rs", "ffi/pool.rs"), ("request::record",)),
    ("response headers", ("request/filter.rs", "ffi/headers.rs", "ngx_http_header_filter_module.c"),
     ("request::filter",)),
    ("module glue (phase handler)", ("src/request/", "src/ffi/", "src/conf/", "src/zone/"),
     ("ngx_http_rate_limit_window_module",)),
    ("limit_req (its handler, rbtree, slab, lock)",
     ("ngx_http_limit_req_module.c", "ngx_rbtree.c", "ngx_slab.c", "ngx_shmtx.c"), ()),
)
CG_OTHER = "nginx and libc, other"
CG_SPLIT_VARIANTS = ("rlw_many", "lr_many", "rlw_hot", "rlw_hot_noheaders", "lr_hot",
                     "strict_many")
CG_SHORT = {"rlw_many": "new key", "lr_many": "limit_req, new key", "rlw_hot": "hot key",
            "rlw_hot_noheaders": "hot key, headers off", "lr_hot": "limit_req, hot key",
            "strict_many": "strict, new key"}


def cg_functions(path):
    """{(file, function): [Ir, D1 misses]} from callgrind_annotate's function list."""
    import subprocess
    out = subprocess.run(["callgrind_annotate", "--auto=no", "--threshold=100",
                          "--show=Ir,D1mr,D1mw", "--sort=Ir", path],
                         capture_output=True, text=True, check=True).stdout
    res, started = {}, False
    for line in out.splitlines():
        if "file:function" in line:
            started = True
            continue
        if not started or not line.strip() or line.startswith("-"):
            continue
        toks = re.sub(r"\(\s*[\d.]+%\)", "", line).split(None, 3)
        if len(toks) < 4:
            continue
        try:
            ir, rm, wm = (0 if t == "." else int(t.replace(",", "")) for t in toks[:3])
        except ValueError:
            continue
        name = re.sub(r"\s+\[[^]]*\]$", "", toks[3])
        file, _, func = name.partition(":")
        cur = res.setdefault((file, func), [0, 0])
        cur[0] += ir
        cur[1] += rm + wm
    return res


def cg_part(file, func):
    for part, files, funcs in CG_PARTS:
        if any(f in file for f in files):
            return part
    for part, files, funcs in CG_PARTS:
        if any(f in func for f in funcs):
            return part
    return CG_OTHER


def cg_per_request(results, v, small, big):
    a = cg_functions("%s/callgrind-%s-%s.out" % (results, v, small))
    b = cg_functions("%s/callgrind-%s-%s.out" % (results, v, big))
    n = int(big) - int(small)
    parts = {}
    for k in set(a) | set(b):
        x, y = a.get(k, [0, 0]), b.get(k, [0, 0])
        p = parts.setdefault(cg_part(*k), [0.0, 0.0])
        p[0] += (y[0] - x[0]) / n
        p[1] += (y[1] - x[1]) / n
    return parts


def cmd_callgrind_split(results, small, big):
    import os
    have = lambda v: all(os.path.exists("%s/callgrind-%s-%s.out" % (results, v, n))
                         for n in (small, big))
    if not have("none"):
        print("_No `none` variant: no split._")
        return
    base = cg_per_request(results, "none", small, big)
    vs = [v for v in CG_SPLIT_VARIANTS if have(v)]
    if not vs:
        print("_No variant to split._")
        return
    per = {v: cg_per_request(results, v, small, big) for v in vs}
    names = [p for p, _, _ in CG_PARTS] + [CG_OTHER]
    out = ["Each cell: instructions / D1 misses, per request over no limiter.", "",
           "| part | " + " | ".join(CG_SHORT[v] for v in vs) + " |",
           "|---|" + "---:|" * len(vs)]
    total = {v: [0.0, 0.0] for v in vs}
    for name in names:
        cells = []
        for v in vs:
            x = per[v].get(name, [0.0, 0.0])
            z = base.get(name, [0.0, 0.0])
            d = [x[0] - z[0], x[1] - z[1]]
            total[v][0] += d[0]
            total[v][1] += d[1]
            cells.append("%s / %.2f" % (fmt_int(d[0]), d[1]))
        out.append("| %s | %s |" % (name, " | ".join(cells)))
    out.append("| **total** | %s |" % " | ".join(
        "**%s / %.2f**" % (fmt_int(total[v][0]), total[v][1]) for v in vs))
    print("\n".join(out))


UNITS_NS = {"ps": 1e-3, "ns": 1.0, "µs": 1e3, "us": 1e3, "ms": 1e6, "s": 1e9}


def parse_criterion(text):
    benches = []  # (name, [lo, mid, hi] in ns)
    last = None
    skip = ("Benchmarking", "Found", "Warning", "Gnuplot", "Running", "Compiling",
            "Finished", "Analyzing", "WARNING", "Performance", "No change", "Change within",
            "change:", "thrpt:", "time:")
    for line in text.splitlines():
        m = re.match(r"^(\S.*?)?\s+time:\s+\[(.+?)\]", line)
        if m:
            name = (m.group(1) or "").strip() or last
            vals = m.group(2).split()
            ns = [float(vals[i]) * UNITS_NS.get(vals[i + 1], float("nan")) for i in (0, 2, 4)]
            benches.append([name, ns, None])
            continue
        m = re.match(r"^\s+thrpt:\s+\[(.+?)\]", line)
        if m and benches:
            vals = m.group(1).split()
            unit = vals[3]
            scale = {"elem/s": 1, "Kelem/s": 1e3, "Melem/s": 1e6, "Gelem/s": 1e9}.get(unit)
            if scale:
                benches[-1][2] = 1e9 / (float(vals[2]) * scale)
            continue
        s = line.strip()
        if s and not line[0].isspace() and not s.startswith(skip):
            last = s
    return benches


def cmd_criterion(path):
    benches = parse_criterion(open(path, errors="replace").read())
    if not benches:
        print("_No criterion results in the output (the `decision` bench defines no benchmarks yet)._")
        return
    mutex = [b for b in benches if "mutex" in b[0].lower()]

    def tokens(s):
        return set(re.split(r"[_\-\s]+", s.lower())) - {"mutex", "table", ""}

    def baseline(name):
        # the mutex bench that differs in one path component only, preferring
        # the one whose differing component shares most words
        # (table_distinct_keys -> mutex_distinct_keys)
        parts = name.split("/")
        best, best_score = None, None
        for m in mutex:
            mp = m[0].split("/")
            if m[0] == name or len(mp) != len(parts):
                continue
            same = sum(a == b for a, b in zip(parts, mp))
            if same != len(parts) - 1:
                continue
            diff = [(a, b) for a, b in zip(parts, mp) if a != b][0]
            score = len(tokens(diff[0]) & tokens(diff[1]))
            if best_score is None or score > best_score:
                best, best_score = m, score
        if best is None and len(mutex) == 1 and mutex[0][0] != name:
            best = mutex[0]
        return best

    def per_decision(b):
        return b[2] if b[2] is not None else b[1][1]

    has_thrpt = any(b[2] is not None for b in benches)
    out = ["| benchmark | criterion time [low mid high] | ns / decision | mutex baseline | ratio to baseline |",
           "|---|---|---:|---|---:|"]
    for b in benches:
        lo, mid, hi = b[1]
        base = None if "mutex" in b[0].lower() else baseline(b[0])
        out.append("| %s | %.2f / %.2f / %.2f ns | %.2f | %s | %s |" % (
            b[0], lo, mid, hi, per_decision(b), base[0] if base else "—",
            "%.2f" % (per_decision(b) / per_decision(base)) if base else "—"))
    if has_thrpt:
        out.append("")
        out.append("ns / decision is taken from criterion's element throughput where the bench reports one.")
    print("\n".join(out))


def kv_table(lines):
    """`word k=v k=v ...` lines -> markdown table rows (bare words: a "case" column)."""
    keys, rows = [], []
    for l in lines:
        row, label = {}, []
        for tok in l.split()[1:]:
            if "=" in tok:
                k, v = tok.split("=", 1)
                row[k] = v
                if k not in keys:
                    keys.append(k)
            else:
                label.append(tok)
        row["_"] = " ".join(label)
        rows.append(row)
    has_label = any(r["_"] for r in rows)
    cols = (["case"] if has_label else []) + keys
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        cells = ([r["_"]] if has_label else []) + [r.get(k, "") for k in keys]
        out.append("| " + " | ".join(cells) + " |")
    return out


def cmd_overrides(path):
    """overrides_lookup/{miss,hit}_{fresh,history_1M}/CAP and
    overrides_ranges/outside_every_range/ID: one table each, the lookup
    after the history against the fresh table (the issue's bound: 2x)."""
    text = open(path, errors="replace").read()
    benches = {b[0]: b[1] for b in parse_criterion(text)}
    if not benches:
        print("_No criterion results in the output._")
        return
    inter = re.findall(r"^overrides_interleaved/(\w+)/(\d+): fresh ([\d.]+) ns, history ([\d.]+) ns, "
                       r"ratio ([\d.]+); fastest ([\d.]+) ns, ([\d.]+) ns", text, re.M)
    if inter:
        print("Interleaved (501 alternating batches of 2,000 lookups of each table; median, and in")
        print("brackets the fastest batch):")
        print()
        print("| overrides= | lookup of | fresh table (ns) | after 1,000,000 overrides with a ttl came and went (ns) | after / fresh (medians) |")
        print("|---:|---|---:|---:|---:|")
        what = {"miss": "a client without an override", "hit": "the overridden client"}
        for kind, cap, f, h, r, f0, h0 in inter:
            print(f"| {cap} | {what.get(kind, kind)} | {float(f):.1f} ({float(f0):.1f}) | "
                  f"{float(h):.1f} ({float(h0):.1f}) | {float(r):.2f} |")
        print()
        print("Criterion, each benchmark on its own (medians):")
        print()
    print("| overrides= | lookup of | fresh table (ns) | after 1,000,000 overrides with a ttl came and went (ns) | after / fresh |")
    print("|---:|---|---:|---:|---:|")
    caps = sorted({int(n.rsplit("/", 1)[1]) for n in benches if n.startswith("overrides_lookup/")})
    for cap in caps:
        for kind, what in (("miss", "a client without an override"), ("hit", "the overridden client")):
            f = benches.get(f"overrides_lookup/{kind}_fresh/{cap}")
            h = benches.get(f"overrides_lookup/{kind}_history_1M/{cap}")
            if f and h:
                print(f"| {cap} | {what} | {f[1]:.1f} | {h[1]:.1f} | {h[1] / f[1]:.2f} |")
    ranges = re.findall(r"^overrides_ranges/(\d+)/(\d+): ([\d.]+) ns; fastest ([\d.]+) ns", text, re.M)
    if ranges:
        print()
        print("Range lookups (the four tables in alternating batches of 2,000; median, and in brackets")
        print("the fastest batch):")
        print()
        print("| range overrides | prefix lengths in use | range lookup of an address outside every range (ns) |")
        print("|---:|---:|---:|")
        for n, lens, ns, fast in ranges:
            print(f"| {int(n):,} | {lens} | {float(ns):.1f} ({float(fast):.1f}) |")


def cmd_accuracy(path):
    text = open(path, errors="replace").read()
    lines = [l.rstrip() for l in text.splitlines()]
    table = [l for l in lines if l.startswith("|")]
    acc = [l for l in lines if re.match(r"^accuracy\b", l)]
    sat = [l for l in lines if re.match(r"^saturation\b", l)]
    if not table and not acc:
        print("_The accuracy bench printed no `accuracy ...` lines (not written yet?)._")
        return
    out = []
    if table:
        out.extend(table)
        out.append("")
    for group in (acc, sat):
        if group:
            if out and out[-1] != "":
                out.append("")
            out.extend(kv_table(group))
    print("\n".join(out))


def cmd_hugepages(path):
    names = {"none": "no limiter",
             "rlw4k": "rate_limit_window, table on 4 KB pages",
             "rlwthp": "rate_limit_window, table on huge pages"}
    kb = {}
    data = {}
    for l in open(path):
        if l.startswith("#"):
            kb = dict(kv.split("=") for kv in l.split()[2:])
            continue
        r = l.split()
        if r:
            data.setdefault(r[2], {})[int(r[1])] = float(r[3])
    vars_ = [v for v in names if v in data]
    reps = sorted(set.intersection(*(set(data[v]) for v in vars_)))
    out = ["| variant | req/s (median) | req/s (min–max) |", "|---|---:|---:|"]
    for v in vars_:
        rps = [data[v][i] for i in reps]
        out.append("| %s | %s | %s–%s |" % (names[v], fmt_int(statistics.median(rps)),
                                           fmt_int(min(rps)), fmt_int(max(rps))))
    out += ["", "| ratio | median of per-rep ratios | 95%% CI of the median | min–max over %d reps |"
            % len(reps), "|---|---:|---:|---:|"]
    for num, den in (("rlwthp", "rlw4k"), ("rlw4k", "none"), ("rlwthp", "none")):
        if num in data and den in data:
            rs = [data[num][i] / data[den][i] for i in reps]
            ci = median_ci(rs)
            out.append("| %s / %s | %.3f | %s | %.3f–%.3f |" % (
                names[num], names[den], statistics.median(rs),
                "%.3f–%.3f" % ci if ci else "—", min(rs), max(rs)))
    if kb:
        out += ["", "`ShmemHugePages` in /proc/meminfo: %s kB before, %s kB after starting "
                "the first nginx, %s kB after starting the second." % (
                    fmt_int(int(kb["before"])), fmt_int(int(kb["after_4k"])),
                    fmt_int(int(kb["after_thp"])))]
    print("\n".join(out))


def scaling_table(rows):
    """rows: (scenario, workers, rep, variant, rps) -> {scenario: {workers:
    {variant: {rep: rps}}}}."""
    data = {}
    for scen, w, rep, var, rps in rows:
        data.setdefault(scen, {}).setdefault(w, {}).setdefault(var, {})[rep] = rps
    return data


def cmd_scaling(path):
    rows, idle = [], {}
    for l in open(path):
        r = l.split()
        if r and not l.startswith("#"):
            rows.append((r[0], int(r[1]), int(r[2]), r[3], float(r[4])))
            if len(r) > 9:  # % of the CPU idle during the run
                idle.setdefault((r[0], int(r[1])), []).append(float(r[9]))
    data = scaling_table(rows)
    out = []
    for scen, title, _targets in SCENARIOS:
        if scen not in data:
            continue
        d = data[scen]
        counts = sorted(d)
        base = {v: statistics.median(d[counts[0]][v].values()) for v in ("none", "rlw", "lr")
                if v in d[counts[0]]}
        out.append("### %s\n" % title)
        out.append("| workers | no limiter req/s | rate_limit_window req/s | limit_req req/s "
                   "| rate_limit_window / no limiter | rate_limit_window / limit_req "
                   "| no limiter × %d worker | rate_limit_window × %d worker | limit_req × %d worker "
                   "| CPU idle (median of all runs) |"
                   % (counts[0], counts[0], counts[0]))
        out.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for w in counts:
            row = d[w]
            med = {v: statistics.median(row[v].values()) for v in ("none", "rlw", "lr") if v in row}

            def ratio(num, den):
                if num not in row or den not in row:
                    return "—"
                reps = sorted(set(row[num]) & set(row[den]))
                rs = [row[num][i] / row[den][i] for i in reps]
                ci = median_ci(rs)
                if ci:
                    return "%.3f (95%% CI %.3f–%.3f)" % (statistics.median(rs), *ci)
                return "%.3f (range %.3f–%.3f)" % (statistics.median(rs), min(rs), max(rs))

            def speedup(v):
                return "%.2f" % (med[v] / base[v]) if v in med and v in base else "—"

            idl = idle.get((scen, w))
            out.append("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                w, *(fmt_int(med[v]) if v in med else "—" for v in ("none", "rlw", "lr")),
                ratio("rlw", "none"), ratio("rlw", "lr"),
                speedup("none"), speedup("rlw"), speedup("lr"),
                "%.1f%%" % statistics.median(idl) if idl else "—"))
        out.append("")
    out.append("Ratios: median of per-rep ratios, with the 95% confidence interval of the "
               "median as in the throughput section where there are 6 reps or more, else "
               "the range.")
    print("\n".join(out))


def cmd_redis(path, rounds="?"):
    """Redis sync on vs off: median req/s and p99 per scenario."""
    rows = [l.split() for l in open(path) if l.strip() and not l.startswith("#")]
    reps = len({r[1] for r in rows})
    out = ["Same module zone without and with `redis=127.0.0.1:PORT sync=100ms` (a local redis-server), "
           f"{reps} rep(s) each, alternating; medians. The sync completed {rounds} rounds on the "
           "10,000-client zone during the runs, with no errors.", "",
           "| scenario | sync off req/s | sync on req/s | on/off | sync off p99 ms | sync on p99 ms |",
           "|---|---|---|---|---|---|"]
    for scen, label in (("hot", "1 hot client"), ("many", "10,000 active clients")):
        def col(v, k):
            return [float(r[k]) for r in rows if r[0] == scen and r[2] == v]
        off, on = statistics.median(col("off", 3)), statistics.median(col("on", 3))
        poff, pon = statistics.median(col("off", 6)), statistics.median(col("on", 6))
        out.append(f"| {label} | {off:,.0f} | {on:,.0f} | {on / off:.3f} | {poff:.2f} | {pon:.2f} |")
    print("\n".join(out))


def cmd_modes(path):
    """mode=strict vs mode=estimate: median req/s per mode and the median of
    per-rep ratios strict / estimate, with its 95% CI and min-max."""
    rows = [l.split() for l in open(path) if l.strip() and not l.startswith("#")]
    # scenario rep variant rps requests non2xx p99ms sockerr idlepct
    out = ["| scenario | estimate req/s (median) | strict req/s (median) | strict / estimate "
           "(median of per-rep ratios) | 95% CI of the median | min–max | reps "
           "| estimate p99 ms | strict p99 ms | CPU idle (median) |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for scen, label in (("many16", "16 keys (hot)"), ("many10000", "10,000 keys")):
        d = {}
        for r in rows:
            if r[0] == scen:
                d.setdefault(r[2], {})[int(r[1])] = (float(r[3]), float(r[6]), float(r[8]))
        if "est" not in d or "strict" not in d:
            continue
        reps = sorted(set(d["est"]) & set(d["strict"]))
        rs = [d["strict"][i][0] / d["est"][i][0] for i in reps]
        ci = median_ci(rs)

        def med(v, k):
            return statistics.median(d[v][i][k] for i in reps)
        idle = statistics.median([d[v][i][2] for v in ("est", "strict") for i in reps])
        out.append("| %s | %s | %s | %.3f | %s | %.3f–%.3f | %d | %.2f | %.2f | %.1f%% |" % (
            label, fmt_int(med("est", 0)), fmt_int(med("strict", 0)), statistics.median(rs),
            "%.3f–%.3f" % ci if ci else "—", min(rs), max(rs), len(reps),
            med("est", 1), med("strict", 1), idle))
    print("\n".join(out))


CLUSTER_CLIENTS = (("one", "1 gateway"), ("rr_sync", "3 gateways, sync"),
                   ("rr_local", "3 gateways, no sync"))


def cmd_cluster(json_path, tsv_path, metrics_path, catchup_path):
    """Admitted per window across gateways, then sync on/off req/s."""
    a = json.load(open(json_path))
    lim = a["limit"]
    out = ["Requests admitted per %d s window (each client sent %d per window; limit %d):"
           % (a["window_s"], a["per_window"], lim), "",
           "| window | limit | " + " | ".join(l for _, l in CLUSTER_CLIENTS) + " |",
           "|---:|---:|" + "---:|" * len(CLUSTER_CLIENTS)]
    adm = a["admitted"]
    n = len(adm["one"])
    for w in range(n):
        out.append("| %d | %d | %s |" % (w + 1, lim, " | ".join(
            str(adm[c][w]) for c, _ in CLUSTER_CLIENTS)))
    out.append("| **most, as × limit** | 1.00 | %s |" % " | ".join(
        "%.2f" % (max(adm[c]) / lim) for c, _ in CLUSTER_CLIENTS))
    out += ["", "Window 1 starts with no history; in the later ones the sliding estimate "
            "also counts the previous window's admissions. Pacing fell behind by %d ms at "
            "worst; statuses other than 200 and 429: %s." % (
                a["max_late_ms"], json.dumps(a["other_statuses"]) if a["other_statuses"] else "none")]
    out += ["", "### Sync on vs off, active clients", ""] + cluster_sync(tsv_path, metrics_path, catchup_path)
    print("\n".join(out))


def cluster_sync(tsv_path, metrics_path, catchup_path):
    """Lines of the sync on/off table: per client count, medians and per-rep ratios."""
    data = {}
    for l in open(tsv_path):
        r = l.split()
        if r and not l.startswith("#"):
            data.setdefault(int(r[0]), {}).setdefault(r[2], {})[int(r[1])] = (float(r[3]), float(r[6]))
    rounds = {}
    for l in open(metrics_path):
        m = re.match(r'rate_limit_window_sync_(rounds_total|keys_pushed_total|failures_total|lag_seconds)'
                     r'\{zone="on_(\d+)"[^}]*\} (\S+)', l)
        if m and 'kind="key"' not in l:  # per-key errors are not failed rounds
            d = rounds.setdefault(int(m.group(2)), {})
            d[m.group(1)] = d.get(m.group(1), 0) + float(m.group(3))
    catchup = dict(l.split() for l in open(catchup_path) if l.strip())
    reps = len(next(iter(data.values()))["on"]) if data else 0
    out = ["One nginx (2 workers) with a zone per client count, without and with "
           "`redis=` (`sync=100ms`, the same redis-server), `limit=1000000` per minute "
           "(every request admitted). wrk cycles X-Key through N keys (bench/keys.lua), "
           "sync off and on alternated (the first rotating), %d rep(s) of each after a "
           "warm-up; a ratio per rep from its two adjacent runs." % reps, "",
           "| active clients | sync off req/s | sync on req/s | on/off (median of per-rep ratios) "
           "| 95% CI of the median | min–max | sync off p99 ms | sync on p99 ms | sync rounds "
           "| failed rounds | keys pushed | lag at the end s | caught up after s |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for n in sorted(data):
        off, on = data[n]["off"], data[n]["on"]
        common = sorted(set(off) & set(on))
        rs = [on[i][0] / off[i][0] for i in common]
        med = lambda d, k: statistics.median(d[i][k] for i in common)
        rd = rounds.get(n, {})
        ci = median_ci(rs)
        out.append("| %s | %s | %s | %.3f | %s | %.3f–%.3f | %.2f | %.2f | %s | %s | %s | %.1f | %s |" % (
            fmt_int(n), fmt_int(med(off, 0)), fmt_int(med(on, 0)), statistics.median(rs),
            "%.3f–%.3f" % ci if ci else "—", min(rs), max(rs), med(off, 1), med(on, 1),
            fmt_int(rd.get("rounds_total", 0)), fmt_int(rd.get("failures_total", 0)),
            fmt_int(rd.get("keys_pushed_total", 0)), rd.get("lag_seconds", -1),
            catchup.get(str(n), "?")))
    out += ["", "The synced zone's own metrics when the load stopped: completed rounds, rounds "
            "that failed (any kind: timeout, connection, reply), keys written, and the lag "
            "(seconds since the last completed round); then how long, with no load, until a "
            "round completed again (\"-\": not within 20 s). Every round reads back every "
            "client active in the window (batches of 1,000 keys, a 2 s deadline per round), "
            "so its cost grows with the active clients, not with the requests."]
    return out


def sections(text):
    """[(heading or None, text)] cut at each "## " line."""
    out, head, buf = [], None, []
    for line in text.splitlines(keepends=True):
        if line.startswith("## "):
            out.append((head, "".join(buf)))
            head, buf = line.strip(), []
        buf.append(line)
    out.append((head, "".join(buf)))
    return out


def splice(old, new):
    """OLD's text with each "## " section that NEW has (but Machine) replaced
    by NEW's, in place; NEW's other sections appended."""
    repl = {h: t for h, t in sections(new) if h and h != "## Machine"}
    out = []
    for h, t in sections(old):
        out.append(repl.pop(h, t))
    if out and not out[-1].endswith("\n\n"):
        out[-1] += "\n"
    out += list(repl.values())
    return "".join(out)


def cmd_splice(old_path, new_path):
    sys.stdout.write(splice(open(old_path).read(), open(new_path).read()))


if __name__ == "__main__":
    {"wrk": cmd_wrk, "throughput": cmd_throughput, "capacity": cmd_capacity,
     "callgrind": cmd_callgrind, "callgrind-split": cmd_callgrind_split,
     "callgrind-footprint": cmd_callgrind_footprint,
     "criterion": cmd_criterion,
     "accuracy": cmd_accuracy, "overrides": cmd_overrides, "redis": cmd_redis, "hugepages": cmd_hugepages,
     "scaling": cmd_scaling, "cluster": cmd_cluster, "modes": cmd_modes, "splice": cmd_splice,
     "selftest": cmd_selftest}[sys.argv[1]](*sys.argv[2:])
