//! Overrides of a `redis=` zone shared by the fleet (the core's
//! `overrides::remote` has the hash, its values and its scripts).
//!
//! A change made here (an API `PUT` or `DELETE`, a reset that lifts a ban,
//! a ban) is written to the override table with a new version, then its
//! id queued in the zone header (`ovr_pending`, one CAS, never a wait on
//! Redis). Worker 0's sync thread, at each round, takes the queued ids out
//! of the queue *before* it reads their states, so that a change made while
//! the write is in flight queues its client again and is written at the
//! next round (a failed write queues them again). It writes each state with
//! its version through a script that keeps the newer of the two (a late or
//! replayed write never overwrites a newer change). About once a second it
//! reads the hash and applies every state newer than the one here (a
//! client still queued keeps its local state until it is written). So a
//! change on any gateway applies on every gateway within about a second
//! plus one `sync=`, and no gateway ever goes back to an older state.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rate_limit_window_core::overrides::remote::{
    field, ovr_key, parse, value, version_ms, DROP_SCRIPT, PUSH_SCRIPT, TOMBSTONE_MS,
};
use rate_limit_window_core::overrides::Overrides;

use crate::sync::ctx::{RoundCtx, RoundError};
use crate::sync::redis_link::Link;
use crate::zone::ZoneConf;

/// How often the hash is read (ms).
const PULL_MS: u64 = 1_000;
/// Longest wait for one pipeline's replies (ms).
const CALL_MS: u64 = 500;
/// Lifetime of the hash after its last write (ms): 30 days.
const HASH_TTL_MS: u64 = 30 * 86_400_000;

/// Queues `id` (a fingerprint or a range's id) for the fleet when `zone`
/// has `redis=`: `"scheduled"`, or `"not shared"` when the queue is full
/// (the change stays local); `null` for a zone without `redis=`. Called
/// after the change was written to the table.
pub(crate) fn share(zone: &ZoneConf, id: u64) -> &'static str {
    if zone.redis.is_none() {
        return "null";
    }
    let Some(header) = zone.header() else {
        return "\"not shared\"";
    };
    if crate::sync::enqueue(&header.ovr_pending, id) {
        "\"scheduled\""
    } else {
        "\"not shared\""
    }
}

/// The round's share of the work: writes the queued changes, and reads the
/// fleet's at most every [`PULL_MS`] (`pulled`: when it last did).
pub(crate) fn round(
    conn: &mut Link,
    ctx: &RoundCtx<'_>,
    pulled: &mut Option<Instant>,
    now: u64,
) -> Result<(), RoundError> {
    let Some(o) = ctx.owner.header.overrides() else {
        return Ok(());
    };
    push(conn, ctx, &o, now)?;
    if pulled.is_some_and(|t| t.elapsed() < Duration::from_millis(PULL_MS)) {
        return Ok(());
    }
    pull(conn, ctx, &o, now)?;
    *pulled = Some(Instant::now());
    Ok(())
}

/// Writes the queued clients' states with their versions. The ids leave
/// the queue first (see the module doc); if the write fails they are
/// queued again.
fn push(conn: &mut Link, ctx: &RoundCtx<'_>, o: &Overrides, now: u64) -> Result<(), RoundError> {
    let q = &ctx.owner.header.ovr_pending;
    let ids: Vec<u64> = q
        .iter()
        .filter(|e| e.load(Ordering::Relaxed) != 0)
        .map(|e| e.swap(0, Ordering::AcqRel))
        .filter(|&id| id != 0)
        .collect();
    if ids.is_empty() {
        return Ok(());
    }
    let key = ovr_key(&ctx.job.name);
    let mut pipe = redis::pipe();
    for &id in &ids {
        let s = o.versioned(id);
        // Unknown: a change in flight (it queues the client again).
        let v = s.version.unwrap_or_else(|| o.next_version(now));
        let state = value(s.entry.as_ref(), v);
        pipe.cmd("EVAL")
            .arg(PUSH_SCRIPT)
            .arg(1)
            .arg(&key)
            .arg(field(id))
            .arg(state);
    }
    pipe.cmd("PEXPIRE").arg(&key).arg(HASH_TTL_MS);
    let replies = match conn.exec(&pipe, Instant::now() + Duration::from_millis(CALL_MS)) {
        Ok(r) => r,
        Err(e) => {
            for &id in &ids {
                crate::sync::enqueue(q, id);
            }
            return Err(e.into());
        }
    };
    // An error reply (the key holds another type, scripts refused) drops
    // the change: it is counted with the keys' errors
    // (`sync_failures_total{kind="key"}`).
    let bad = replies
        .iter()
        .filter(|v| !matches!(v, redis::Value::Int(_)))
        .count();
    let header = ctx.owner.header;
    header.sync_err_key.fetch_add(bad as u64, Ordering::Relaxed);
    Ok(())
}

/// Reads the hash and applies each state newer than the one here; drops
/// expired entries and old removals (only while they still hold what was
/// read).
fn pull(conn: &mut Link, ctx: &RoundCtx<'_>, o: &Overrides, now: u64) -> Result<(), RoundError> {
    let key = ovr_key(&ctx.job.name);
    let mut pipe = redis::pipe();
    pipe.cmd("HGETALL").arg(&key);
    let replies = conn.exec(&pipe, Instant::now() + Duration::from_millis(CALL_MS))?;
    let Some(fields) = replies.first().and_then(crate::sync::ctx::fields) else {
        return Ok(());
    };
    let pending: HashSet<u64> = ctx
        .owner
        .header
        .ovr_pending
        .iter()
        .map(|e| e.load(Ordering::Acquire))
        .filter(|&id| id != 0)
        .collect();
    let mut stale = Vec::new();
    for (f, v) in fields {
        let Some(read) = parse(f, v) else {
            continue;
        };
        o.saw_version(read.version);
        let old = match read.entry {
            Some(e) => e.expired(now),
            None => now.saturating_sub(version_ms(read.version)) > TOMBSTONE_MS,
        };
        if old {
            stale.push((f.to_vec(), v.to_vec()));
        }
        if pending.contains(&read.id) || read.entry.is_some_and(|e| e.expired(now)) {
            continue;
        }
        let _ = o.apply_remote(read.id, read.entry, read.version, now);
    }
    if stale.is_empty() {
        return Ok(());
    }
    let mut pipe = redis::pipe();
    for (f, v) in stale {
        pipe.cmd("EVAL")
            .arg(DROP_SCRIPT)
            .arg(1)
            .arg(&key)
            .arg(f)
            .arg(v);
    }
    conn.exec(&pipe, Instant::now() + Duration::from_millis(CALL_MS))?;
    Ok(())
}
