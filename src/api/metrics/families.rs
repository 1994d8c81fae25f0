//! The Prometheus exposition as data: one table of metric families (name,
//! type, help, value) and one loop that writes them.

use core::fmt::{self, Write as _};
use core::sync::atomic::Ordering;

use rate_limit_window_core::conf::redis_url::OutagePolicy;
use rate_limit_window_core::engine::shed::Priority;
use rate_limit_window_core::overrides::{ChangeKind, Overrides};
use rate_limit_window_core::shm::places::PlaceStats;
use rate_limit_window_core::shm::tally::Decided;
use rate_limit_window_core::{Counter, FailPolicy, Table};

use crate::api::format::Label;
use crate::worker::sweep;
use crate::zone::shed::ShedConf;
use crate::zone::tally::TallyConf;
use crate::zone::{ZoneConf, ZoneHeader};

/// An initialised zone, as the value functions read it.
pub struct Live<'a> {
    pub zone: &'a ZoneConf,
    pub table: &'a Table<'static>,
    pub header: &'a ZoneHeader,
    /// Epoch ms of the scrape.
    pub now: u64,
}

/// A sample's value, formatted as the exposition has always written it.
enum Value {
    Int(u64),
    Float(f64),
    /// Seconds since the epoch ms it holds, three decimals; -1 for none.
    Age(Option<u64>, u64),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Value::Int(v) => write!(f, "{v}"),
            Value::Float(v) => write!(f, "{v}"),
            Value::Age(None, _) => f.write_str("-1"),
            Value::Age(Some(t), now) => write!(f, "{:.3}", now.saturating_sub(t) as f64 / 1000.0),
        }
    }
}

type Read = fn(&Live) -> Value;

/// The samples of a family for one zone.
enum Samples {
    /// One sample, labelled by zone only.
    One(Read),
    /// One sample per value of one more label.
    By(&'static str, &'static [(&'static str, Read)]),
    /// A summary without quantiles: `NAME_sum` and `NAME_count`.
    SumCount(Read, Read),
}

struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    /// Only for zones with `redis=`; the family is left out when none has.
    redis_only: bool,
    samples: Samples,
}

fn counter(l: &Live, c: Counter) -> Value {
    Value::Int(l.table.counter(c))
}

fn atomic(v: &core::sync::atomic::AtomicU64) -> Value {
    Value::Int(v.load(Ordering::Relaxed))
}

const fn family(
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    samples: Samples,
) -> Family {
    Family {
        name,
        kind,
        help,
        redis_only: false,
        samples,
    }
}

const fn sync_family(
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    read: Read,
) -> Family {
    Family {
        name,
        kind,
        help,
        redis_only: true,
        samples: Samples::One(read),
    }
}

/// Every family, in the order of the exposition.
const FAMILIES: &[Family] = &[
    family(
        "rate_limit_window_requests_total",
        "counter",
        "Requests judged by the zone, by result.",
        Samples::By(
            "result",
            &[
                ("passed", |l| counter(l, Counter::Passed)),
                ("rejected", |l| counter(l, Counter::Rejected)),
                ("rejected_dry_run", |l| counter(l, Counter::RejectedDryRun)),
                ("exempt", |l| counter(l, Counter::Exempt)),
            ],
        ),
    ),
    family(
        "rate_limit_window_evictions_total",
        "counter",
        "Slots taken over for a new client: idle (no traffic for 2+ windows), live (the zone is too small), over_limit (live, and refused since its last admission: every candidate was at its limit; also counted in live).",
        Samples::By(
            "kind",
            &[
                ("idle", |l| counter(l, Counter::EvictIdle)),
                ("live", |l| counter(l, Counter::EvictLive)),
                ("over_limit", |l| atomic(&l.header.evict_over_limit)),
            ],
        ),
    ),
    family(
        "rate_limit_window_fail_closed_total",
        "counter",
        "Requests rejected by fail=closed: a new client while the zone was full, or an invalid limit value.",
        Samples::One(|l| counter(l, Counter::FailClosed)),
    ),
    family(
        "rate_limit_window_clock_backwards_total",
        "counter",
        "Times a worker saw the clock older than a client's window (an NTP step back); counts were kept.",
        Samples::One(|l| counter(l, Counter::ClockBackwards)),
    ),
    family(
        "rate_limit_window_slots",
        "gauge",
        "Client slots the zone can hold.",
        Samples::One(|l| Value::Int(l.table.capacity() as u64)),
    ),
    family(
        "rate_limit_window_slots_used",
        "gauge",
        "Estimate of slots holding a client active in the current or previous window (a scan without locks).",
        Samples::One(|l| Value::Int(sweep::slots_used(l.table, l.header, l.now))),
    ),
    family(
        "rate_limit_window_invalid_limit_total",
        "counter",
        "Requests whose limit variable held something other than an integer in range (the zone's fail policy applied).",
        Samples::One(|l| atomic(&l.header.invalid_limits.count)),
    ),
    family(
        "rate_limit_window_invalid_charge_total",
        "counter",
        "Responses whose charge= value was empty or not an integer (the request counted its cost= instead).",
        Samples::One(|l| atomic(&l.header.charge.invalid.count)),
    ),
    family(
        "rate_limit_window_near_limit_total",
        "counter",
        "Admitted requests whose estimate after admission was at or above 80% of their limit.",
        Samples::One(|l| atomic(&l.header.near_limit)),
    ),
    family(
        "rate_limit_window_swept_total",
        "counter",
        "Slots of clients silent for 2+ windows whose counts the sweep cleared (harmless; it keeps long-idle clients from coming back with old counts).",
        Samples::One(|l| atomic(&l.header.swept)),
    ),
    sync_family(
        "rate_limit_window_sync_errors_total",
        "counter",
        "Failed Redis sync rounds (connect, I/O or protocol errors).",
        |l| atomic(&l.header.sync_errors),
    ),
    sync_family(
        "rate_limit_window_sync_rounds_total",
        "counter",
        "Completed Redis sync rounds.",
        |l| atomic(&l.header.sync_rounds),
    ),
    sync_family(
        "rate_limit_window_sync_lag_seconds",
        "gauge",
        "Seconds since the last sync round that visited every active client (-1: none yet).",
        |l| {
            let last = l.header.last_sync_ms.load(Ordering::Relaxed);
            Value::Age((last != 0).then_some(last), l.now)
        },
    ),
    Family {
        name: "rate_limit_window_sync_failures_total",
        kind: "counter",
        help: "Redis sync failures by kind: timeout, connection, reply, auth (credentials refused), tls (handshake failed), master (no master known to the sentinels) and cluster_down fail a round; key is one key's error reply in a round that went on.",
        redis_only: true,
        samples: Samples::By(
            "kind",
            &[
                ("timeout", |l| atomic(&l.header.sync_err_timeout)),
                ("connection", |l| atomic(&l.header.sync_err_connection)),
                ("reply", |l| atomic(&l.header.sync_err_reply)),
                ("auth", |l| atomic(&l.header.sync_err_auth)),
                ("tls", |l| atomic(&l.header.sync_err_tls)),
                ("master", |l| atomic(&l.header.sync_err_master)),
                ("cluster_down", |l| atomic(&l.header.sync_err_cluster_down)),
                ("key", |l| atomic(&l.header.sync_err_key)),
            ],
        ),
    },
    sync_family(
        "rate_limit_window_sync_keys_pushed_total",
        "counter",
        "Keys whose count this gateway wrote to Redis.",
        |l| atomic(&l.header.sync_keys_pushed),
    ),
    sync_family(
        "rate_limit_window_sync_keys_read_total",
        "counter",
        "Keys read back from Redis (clients flagged near their limit by some gateway).",
        |l| atomic(&l.header.stats.read_total),
    ),
    Family {
        name: "rate_limit_window_sync_round_keys",
        kind: "gauge",
        help: "Keys the last sync round wrote (pushed) and read back (read).",
        redis_only: true,
        samples: Samples::By(
            "kind",
            &[
                ("pushed", |l| atomic(&l.header.stats.last_pushed)),
                ("read", |l| atomic(&l.header.stats.last_read)),
            ],
        ),
    },
    Family {
        name: "rate_limit_window_sync_round_seconds",
        kind: "summary",
        help: "Duration of the sync rounds that went through.",
        redis_only: true,
        samples: Samples::SumCount(
            |l| Value::Float(l.header.stats.round_ms_sum.load(Ordering::Relaxed) as f64 / 1000.0),
            |l| atomic(&l.header.stats.round_count),
        ),
    },
    sync_family(
        "rate_limit_window_sync_round_p99_seconds",
        "gauge",
        "99th percentile of the duration of the last 200 sync rounds.",
        |l| Value::Float(l.header.stats.round_p99_ms.load(Ordering::Relaxed) as f64 / 1000.0),
    ),
    sync_family(
        "rate_limit_window_sync_flagged",
        "gauge",
        "Clients flagged near their limit in the current window by any gateway (read back each round).",
        |l| atomic(&l.header.stats.flagged),
    ),
    sync_family(
        "rate_limit_window_sync_received_total",
        "counter",
        "Requests of other gateways added to this gateway's counts by the sync.",
        |l| atomic(&l.header.stats.received),
    ),
    sync_family(
        "rate_limit_window_sync_peers",
        "gauge",
        "Gateways seen in Redis in the last minute sharing this zone (same secret, window and mode), this one included; 0 until read.",
        |l| atomic(&l.header.stats.peers),
    ),
    sync_family(
        "rate_limit_window_sync_peers_mismatched",
        "gauge",
        "Gateways seen in Redis in the last minute under this zone's name with another secret, window or mode: they do not share counts with this one.",
        |l| atomic(&l.header.stats.mismatched),
    ),
    sync_family(
        "rate_limit_window_sync_owner_generation",
        "gauge",
        "Generation of the sync thread that owns the zone's sync (0: none); it grows with each reload or respawn of worker 0.",
        |l| atomic(&l.header.sync_owner),
    ),
    family(
        "rate_limit_window_window_seconds",
        "gauge",
        "Window length of the zone in seconds.",
        Samples::One(|l| Value::Float(l.zone.window.secs() as f64)),
    ),
    family(
        "rate_limit_window_delayed_total",
        "counter",
        "Requests held by delay=, by how the hold ended.",
        Samples::By(
            "result",
            &[
                ("admitted", |l| atomic(&l.header.delay.admitted)),
                ("rejected", |l| atomic(&l.header.delay.rejected)),
                ("abandoned", |l| atomic(&l.header.delay.abandoned)),
                ("dry_run", |l| atomic(&l.header.delay.dry_run)),
            ],
        ),
    ),
    family(
        "rate_limit_window_delay_seconds",
        "summary",
        "Time held requests waited before they were admitted.",
        Samples::SumCount(
            |l| Value::Float(l.header.delay.wait_ms.load(Ordering::Relaxed) as f64 / 1000.0),
            |l| atomic(&l.header.delay.admitted),
        ),
    ),
    family(
        "rate_limit_window_delay_share_full_total",
        "counter",
        "Delayable requests refused at once: their client's share of the delay queue was full.",
        Samples::One(|l| atomic(&l.header.delay.share_full)),
    ),
    family(
        "rate_limit_window_delay_held",
        "gauge",
        "Requests held by delay= now, by every worker.",
        Samples::One(|l| Value::Int(l.zone.turns.as_ref().map_or(0, |t| t.gauge()))),
    ),
    family(
        "rate_limit_window_delay_turns",
        "gauge",
        "Turns of delay='s queue taken now (held requests waiting behind their client's), by every worker.",
        Samples::One(|l| Value::Int(l.zone.turns.as_ref().map_or(0, |t| t.turns()))),
    ),
    family(
        "rate_limit_window_in_flight",
        "gauge",
        "Requests in flight now that hold one of the zone's in_flight= places, by every worker.",
        Samples::One(|l| Value::Int(l.zone.places.as_ref().map_or(0, |p| p.in_flight()))),
    ),
    family(
        "rate_limit_window_in_flight_total",
        "counter",
        "in_flight= places, by result: taken (a request admitted), rejected (its client's places were all taken), untracked (no room to count it, fail=open admitted it), no_room (no room to count it, fail=closed refused it), reclaimed (held by a process that died, taken back).",
        Samples::By(
            "result",
            &[
                ("taken", |l| places(l, |s| s.taken)),
                ("rejected", |l| places(l, |s| s.full)),
                ("untracked", |l| no_room(l, FailPolicy::Open)),
                ("no_room", |l| no_room(l, FailPolicy::Closed)),
                ("reclaimed", |l| places(l, |s| s.reclaimed)),
            ],
        ),
    ),
    family(
        "rate_limit_window_overrides",
        "gauge",
        "Per-client overrides and bans in the zone now (at most overrides=).",
        Samples::One(|l| ovr(l, |o, _| o.live())),
    ),
    family(
        "rate_limit_window_overrides_total",
        "counter",
        "Overrides set or removed through the API (a reset that lifts a ban: remove), by action.",
        Samples::By(
            "action",
            &[
                ("limit", |l| ovr(l, |o, _| o.changes(ChangeKind::Limit))),
                ("in_flight", |l| {
                    ovr(l, |o, _| o.changes(ChangeKind::InFlight))
                }),
                ("block", |l| ovr(l, |o, _| o.changes(ChangeKind::Block))),
                ("exempt", |l| ovr(l, |o, _| o.changes(ChangeKind::Exempt))),
                ("remove", |l| ovr(l, |o, _| o.changes(ChangeKind::Remove))),
            ],
        ),
    ),
    family(
        "rate_limit_window_bans_total",
        "counter",
        "Clients banned by a limit's ban=.",
        Samples::One(|l| ovr(l, |o, _| o.bans_total())),
    ),
    family(
        "rate_limit_window_banned",
        "gauge",
        "Clients banned now (ban=).",
        Samples::One(|l| ovr(l, |o, now| o.banned_now(now))),
    ),
    family(
        "rate_limit_window_redis_outage",
        "gauge",
        "1 for the zone's redis_outage= policy while its Redis is out (in force), else 0.",
        Samples::By(
            "policy",
            &[
                ("local", |l| outage(l, OutagePolicy::Local)),
                ("share", |l| outage(l, OutagePolicy::Share)),
                ("closed", |l| outage(l, OutagePolicy::Closed)),
            ],
        ),
    ),
    family(
        "rate_limit_window_bans_evicted_total",
        "counter",
        "Bans evicted from a full override table to make room for an operator's change.",
        Samples::One(|l| ovr(l, |o, _| o.bans_evicted())),
    ),
    family(
        "rate_limit_window_overrides_misfit_total",
        "counter",
        "Reads of the fleet's overrides (redis=) that found no room in this gateway's table.",
        Samples::One(|l| ovr(l, |o, _| o.remote_misfits())),
    ),
    sync_family(
        "rate_limit_window_fleet_values_ignored_total",
        "counter",
        "Override values read from Redis and ignored: another secret= (another fleet), malformed or changed by someone without the secret.",
        |l| ovr(l, |o, _| o.ignored()),
    ),
    sync_family(
        "rate_limit_window_fleet_heals_total",
        "counter",
        "Times this gateway wrote its overrides back to a Redis that lost them (emptied, restarted without data, failed over to a replica that lagged).",
        |l| ovr(l, |o, _| o.heals()),
    ),
    sync_family(
        "rate_limit_window_fleet_unsent",
        "gauge",
        "Overrides, bans and removals changed on this gateway that Redis has not yet given a place in the fleet's order (written again until it does).",
        |l| ovr(l, |o, _| o.unsent()),
    ),
];

/// A counter of the zone's in-flight places (0 before they exist).
fn places(l: &Live, read: fn(PlaceStats) -> u64) -> Value {
    Value::Int(l.zone.places.as_ref().map_or(0, |p| read(p.stats())))
}

/// 1 when `policy` is the zone's `redis_outage=` and its Redis is out.
fn outage(l: &Live, policy: OutagePolicy) -> Value {
    let mine = l.zone.redis.as_ref().is_some_and(|r| r.outage == policy);
    let down = l.header.down_since_ms.load(Ordering::Relaxed) != 0;
    Value::Int(u64::from(mine && down))
}

/// Requests of the zone's places that found no room, when the zone's
/// `fail=` is `fail` (admitted untracked, or refused), else 0.
fn no_room(l: &Live, fail: FailPolicy) -> Value {
    if l.zone.fail != fail {
        return Value::Int(0);
    }
    places(l, |s| s.no_room)
}

/// A value read from the zone's override table (0 before it exists).
fn ovr(l: &Live, read: fn(&Overrides, u64) -> u64) -> Value {
    Value::Int(l.zone.overrides.as_ref().map_or(0, |o| read(o, l.now)))
}

/// The module's families (zone/tally.rs): requests decided, once per
/// request, and per route of `name=`.
fn tally_families(o: &mut String, conf: &TallyConf) {
    let Some(tally) = conf.tally else {
        return;
    };
    let _ = writeln!(
        o,
        "# HELP rate_limit_window_decided_total {DECIDED_HELP}\n\
         # TYPE rate_limit_window_decided_total counter"
    );
    for what in Decided::ALL {
        let _ = writeln!(
            o,
            "rate_limit_window_decided_total{{result=\"{}\"}} {}",
            what.label(),
            tally.decided_total(what)
        );
    }
    if conf.routes.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "# HELP rate_limit_window_route_requests_total {ROUTE_HELP}\n\
         # TYPE rate_limit_window_route_requests_total counter"
    );
    for (n, name) in conf.routes.iter().enumerate() {
        let slot = conf.slot(n as u8);
        for what in Decided::ALL {
            let _ = writeln!(
                o,
                "rate_limit_window_route_requests_total{{route=\"{}\",result=\"{}\"}} {}",
                Label(name),
                what.label(),
                tally.route_total(slot, what)
            );
        }
    }
}

/// HELP of `rate_limit_window_decided_total`.
const DECIDED_HELP: &str = "Requests decided by the module's limits, once per request whatever the number of its limits, by the request's result ($rate_limit_window_status).";
/// HELP of `rate_limit_window_route_requests_total`.
const ROUTE_HELP: &str = "Requests decided in locations with a limit of name=ROUTE, once per request and route, by the request's result.";

/// The Prometheus text exposition (format 0.0.4) of the module's tally
/// and every initialised zone.
pub fn exposition(tally: &TallyConf, zones: &[Live]) -> String {
    let mut o = String::with_capacity(1024 + zones.len() * 1024);
    tally_families(&mut o, tally);
    for f in FAMILIES {
        let of_family = |l: &&Live| !f.redis_only || l.zone.redis.is_some();
        if f.redis_only && !zones.iter().any(|l| of_family(&l)) {
            continue;
        }
        let _ = writeln!(o, "# HELP {} {}", f.name, f.help);
        let _ = writeln!(o, "# TYPE {} {}", f.name, f.kind);
        for l in zones.iter().filter(of_family) {
            let zone = Label(l.zone.name.as_bytes());
            match &f.samples {
                Samples::One(read) => {
                    let _ = writeln!(o, "{}{{zone=\"{zone}\"}} {}", f.name, read(l));
                }
                Samples::SumCount(sum, count) => {
                    let _ = writeln!(o, "{}_sum{{zone=\"{zone}\"}} {}", f.name, sum(l));
                    let _ = writeln!(o, "{}_count{{zone=\"{zone}\"}} {}", f.name, count(l));
                }
                Samples::By(label, values) => {
                    for (v, read) in *values {
                        let _ = writeln!(
                            o,
                            "{}{{zone=\"{zone}\",{label}=\"{v}\"}} {}",
                            f.name,
                            read(l)
                        );
                    }
                }
            }
        }
    }
    zone_info(&mut o, zones);
    o
}

/// `rate_limit_window_zone_info{zone,context}`: 1 per zone, with the
/// block it is declared in (`http` or `stream`), to join on `zone`.
fn zone_info(o: &mut String, zones: &[Live]) {
    let name = "rate_limit_window_zone_info";
    let _ = writeln!(
        o,
        "# HELP {name} The block each zone is declared in (context: http or stream); always 1."
    );
    let _ = writeln!(o, "# TYPE {name} gauge");
    for l in zones {
        let zone = Label(l.zone.name.as_bytes());
        let context = l.zone.context.as_str();
        let _ = writeln!(o, "{name}{{zone=\"{zone}\",context=\"{context}\"}} 1");
    }
}

/// The shed groups' families (`rate_limit_window_shed`), after the zones':
/// requests shed and admitted per priority, in flight now, and `max=`.
pub fn shed_exposition(o: &mut String, groups: &[&ShedConf]) {
    let live: Vec<(&ShedConf, _)> = groups
        .iter()
        .filter_map(|g| Some((*g, g.group.as_ref()?)))
        .collect();
    if live.is_empty() {
        return;
    }
    let head = |o: &mut String, name: &str, kind: &str, help: &str| {
        let _ = writeln!(o, "# HELP {name} {help}");
        let _ = writeln!(o, "# TYPE {name} {kind}");
    };
    let by_priority = |o: &mut String, name: &str, read: &dyn Fn(&(&ShedConf, _), usize) -> u64| {
        for g in &live {
            let zone = Label(g.0.name.as_bytes());
            for p in Priority::ALL {
                let v = read(g, p.index());
                let _ = writeln!(o, "{name}{{zone=\"{zone}\",priority=\"{}\"}} {v}", p.name());
            }
        }
    };
    head(o, "rate_limit_window_shed_total", "counter", "Requests shed by rate_limit_window_shed (answered its status= with Retry-After, never counted by the rate limits), by priority.");
    by_priority(o, "rate_limit_window_shed_total", &|g, p| g.1.shed_total(p));
    head(
        o,
        "rate_limit_window_shed_admitted_total",
        "counter",
        "Requests a shed group admitted, by priority.",
    );
    by_priority(o, "rate_limit_window_shed_admitted_total", &|g, p| {
        g.1.admitted_total(p)
    });
    let one = |o: &mut String, name: &str, read: &dyn Fn(&(&ShedConf, _)) -> u64| {
        for g in &live {
            let zone = Label(g.0.name.as_bytes());
            let _ = writeln!(o, "{name}{{zone=\"{zone}\"}} {}", read(g));
        }
    };
    head(
        o,
        "rate_limit_window_shed_in_flight",
        "gauge",
        "Requests of the shed group in flight now, by every worker.",
    );
    one(o, "rate_limit_window_shed_in_flight", &|g| {
        u64::from(g.1.in_flight())
    });
    head(o, "rate_limit_window_shed_max", "gauge", "The shed group's max= (low, default and high requests are shed at max minus reserve_low=, reserve= and reserve_high=, critical ones at max).");
    one(o, "rate_limit_window_shed_max", &|g| {
        u64::from(g.0.limits.max)
    });
    head(o, "rate_limit_window_shed_untracked_total", "counter", "Requests a shed group admitted without counting them (no room in its ledger, or every owner taken).");
    one(o, "rate_limit_window_shed_untracked_total", &|g| {
        g.1.untracked_total()
    });
}
