//! Overrides of a `redis=` zone shared by the fleet (the core's
//! `override_sync` has the hash and its values).
//!
//! A change made here (an API `PUT` or `DELETE`, a reset that lifts a ban,
//! a ban) queues the client's fingerprint in the zone header
//! (`ovr_pending`, one CAS, never a wait on Redis). Worker 0's sync thread,
//! at each round, writes the queued clients' states (`HSET` of the whole
//! state: idempotent), then, about once a second, reads the hash and
//! applies every other gateway's changes here (a client still queued keeps
//! its local state until it is written). So a change on any gateway
//! applies on every gateway within about a second plus one `sync=`.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rate_limit_window_core::overrides::remote::{
    field, ovr_key, parse, value, Remote, TOMBSTONE_MS,
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

/// Queues `fp` for the fleet when `zone` has `redis=`: `"scheduled"`, or
/// `"not shared"` when the queue is full (the change stays local); `null`
/// for a zone without `redis=`.
pub(crate) fn share(zone: &ZoneConf, fp: u64) -> &'static str {
    if zone.redis.is_none() {
        return "null";
    }
    let Some(header) = zone.header() else {
        return "\"not shared\"";
    };
    if crate::sync::enqueue(&header.ovr_pending, fp) {
        "\"scheduled\""
    } else {
        "\"not shared\""
    }
}

/// Whether `fp` waits in the queue.
fn pending(ctx: &RoundCtx<'_>, fp: u64) -> bool {
    let q = &ctx.owner.header.ovr_pending;
    q.iter().any(|e| e.load(Ordering::Relaxed) == fp)
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

/// Writes the queued clients' states; a client leaves the queue once its
/// write went through.
fn push(conn: &mut Link, ctx: &RoundCtx<'_>, o: &Overrides, now: u64) -> Result<(), RoundError> {
    let q = &ctx.owner.header.ovr_pending;
    let fps: Vec<u64> = q
        .iter()
        .map(|e| e.load(Ordering::Acquire))
        .filter(|&f| f != 0)
        .collect();
    if fps.is_empty() {
        return Ok(());
    }
    let key = ovr_key(&ctx.job.name);
    let mut pipe = redis::pipe();
    for &fp in &fps {
        let state = value(o.get(fp, now).as_ref(), now);
        pipe.cmd("HSET").arg(&key).arg(field(fp)).arg(state);
    }
    pipe.cmd("PEXPIRE").arg(&key).arg(HASH_TTL_MS);
    let replies = conn.exec(&pipe, Instant::now() + Duration::from_millis(CALL_MS))?;
    // An error reply (the key holds another type) drops the change: it is
    // counted with the keys' errors (`sync_failures_total{kind="key"}`).
    let bad = replies
        .iter()
        .filter(|v| !matches!(v, redis::Value::Int(_)))
        .count();
    let header = ctx.owner.header;
    header.sync_err_key.fetch_add(bad as u64, Ordering::Relaxed);
    for fp in fps {
        // A client changed again meanwhile was written with its newer
        // state or is written at the next round: either way, done.
        let _ = q.iter().any(|e| {
            e.compare_exchange(fp, 0, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        });
    }
    Ok(())
}

/// Reads the hash and applies what other gateways changed; deletes
/// expired entries and old tombstones (idempotent).
fn pull(conn: &mut Link, ctx: &RoundCtx<'_>, o: &Overrides, now: u64) -> Result<(), RoundError> {
    let key = ovr_key(&ctx.job.name);
    let mut pipe = redis::pipe();
    pipe.cmd("HGETALL").arg(&key);
    let replies = conn.exec(&pipe, Instant::now() + Duration::from_millis(CALL_MS))?;
    let Some(fields) = replies.first().and_then(crate::sync::ctx::fields) else {
        return Ok(());
    };
    let mut stale = Vec::new();
    for (f, v) in fields {
        let Some(remote) = parse(f, v) else {
            continue;
        };
        let fp = match remote {
            Remote::Set(e) => e.fp,
            Remote::Deleted(_) => u64::from_str_radix(&String::from_utf8_lossy(f), 16).unwrap_or(0),
        };
        if pending(ctx, fp) {
            continue;
        }
        match remote {
            Remote::Set(e) if e.expired(now) => stale.push(f.to_vec()),
            Remote::Set(e) => {
                if o.get(fp, now) != Some(e) {
                    let _ = o.set(e, now);
                }
            }
            Remote::Deleted(at) => {
                o.remove(fp, now);
                if now.saturating_sub(at) > TOMBSTONE_MS {
                    stale.push(f.to_vec());
                }
            }
        }
    }
    if stale.is_empty() {
        return Ok(());
    }
    let mut pipe = redis::pipe();
    for f in stale {
        pipe.cmd("HDEL").arg(&key).arg(f);
    }
    conn.exec(&pipe, Instant::now() + Duration::from_millis(CALL_MS))?;
    Ok(())
}
