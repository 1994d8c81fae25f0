//! One sync round of a Redis-backed zone (see `mod.rs` for the thread and
//! `docs/gateways.md` for the design):
//!
//! 1. the `DELETE` resets queued since the last round (`DEL`);
//! 2. at most once a second, this gateway's fleet profile (`fleet.rs` in
//!    the core) is written and the fleet hash read;
//! 3. what is new of the window's hot list (`LRANGE` from what was read);
//! 4. per active client that can matter (its own count here reached the
//!    threshold, or some gateway flagged it; `hot::HotSet::work`), from
//!    where the last round stopped: `HSET` of this gateway's own count when
//!    it changed (and `PEXPIRE`), `RPUSH` of its fingerprint to the hot
//!    list when its own count reached the threshold (once per window), and
//!    `HGETALL`. An unflagged client below the threshold costs nothing.
//!
//! Every write sets a value (`HSET`, `PEXPIRE`, `DEL`) or appends an entry
//! that readers treat as a set member (`RPUSH`): replaying any part of a
//! round after a lost reply never moves a count.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rate_limit_window_core::cluster::fleet::{fleet_key, stale, view};
use rate_limit_window_core::cluster::hot::{
    fp_text, hot_key, resume_from, HotSet, Thresholds, Work,
};
use rate_limit_window_core::cluster::{gateway_field, redis_key, shares, Push};
use redis::Value;

use crate::sync::ctx::{bytes, fields, time_ms, RoundCtx, RoundError};
use crate::sync::redis_link::Link;

/// Largest number of keys per pipelined batch.
const BATCH: usize = 1000;
/// Longest one pipelined batch may wait for its replies (ms): also about
/// the longest a stop waits for a round in flight.
const BATCH_MS: u64 = 500;
/// Shortest whole-round deadline (ms); it is twice `sync=` when longer.
const ROUND_MIN_MS: u64 = 2_000;
/// How often the fleet profile is written and the fleet read (ms).
const FLEET_MS: u64 = 1_000;
/// Lifetime of the fleet hash after the last write (ms).
const FLEET_TTL_MS: u64 = 3_600_000;

/// What a sync thread keeps from one round to the next.
#[derive(Default)]
pub struct RoundState {
    /// The slot the next round starts at.
    pub cursor: u32,
    hot: HotSet,
    pushes: Vec<Push>,
    work: Vec<Item>,
    fleet_at: Option<Instant>,
    /// This gateway's clock minus Redis's `TIME` (ms), measured by the
    /// fleet step: the fleet's ages are Redis's.
    redis_offset: Option<i64>,
}

/// One client's commands in a round (always read back).
#[derive(Clone, Copy)]
struct Item {
    push: Push,
    work: Work,
}

/// How a round ended without an error.
pub struct Done {
    /// Every active client was visited (false: the round deadline cut it).
    pub full: bool,
    pub pushed: u64,
    pub read: u64,
}

/// One round; see the module doc. Visits the clients from where the last
/// round stopped; stops early, keeping its place, at the round deadline
/// (twice the interval, at least 2 s). Each batch has `BATCH_MS`; between
/// batches the owner beats its heartbeat and checks the stop flag.
pub fn round(
    conn: &mut Link,
    ctx: &RoundCtx<'_>,
    st: &mut RoundState,
    now: u64,
) -> Result<Done, RoundError> {
    let round_ms = (ctx.job.sync_ms * 2).max(ROUND_MIN_MS);
    let round_deadline = Instant::now() + Duration::from_millis(round_ms);
    reset_keys(conn, ctx, now)?;
    go_on(ctx)?;
    fleet(conn, ctx, st, now)?;
    go_on(ctx)?;
    let index = ctx.job.window.index(now);
    read_hot(conn, ctx, st, index)?;
    go_on(ctx)?;
    // The clients first, then the limits: a request notes its limit
    // before it is counted, so every client planned here was judged
    // against a limit the thresholds see (the other order, with a round
    // between a window's first note and its first counts, took the limit
    // as unknown and flagged every client counted meanwhile).
    st.pushes.clear();
    ctx.ledger.plan(ctx.table, now, &mut st.pushes);
    let stats = &ctx.owner.header.stats;
    let t = Thresholds::new(
        stats.min_limit(index),
        stats.peers.load(Ordering::Relaxed),
        ctx.owner.header.overrides().as_ref(),
        now,
    );
    resume_from(&mut st.pushes, st.cursor);
    st.work.clear();
    for &push in &st.pushes {
        if let Some(work) = st.hot.work(&push, t.of(push.fingerprint)) {
            st.work.push(Item { push, work });
        }
    }
    let mut done = Done {
        full: true,
        pushed: 0,
        read: 0,
    };
    let work = std::mem::take(&mut st.work);
    let result = run_batches(conn, ctx, st, &work, now, round_deadline, &mut done);
    st.work = work;
    result.map(|()| done)
}

/// Between two steps of a round: on with it, unless the thread stops or
/// lost the zone (a plain link also checks the stop on every read).
fn go_on(ctx: &RoundCtx<'_>) -> Result<(), RoundError> {
    if ctx.owner.keep_on(ctx.stop) {
        Ok(())
    } else {
        Err(RoundError::Stopped)
    }
}

fn run_batches(
    conn: &mut Link,
    ctx: &RoundCtx<'_>,
    st: &mut RoundState,
    work: &[Item],
    now: u64,
    round_deadline: Instant,
    done: &mut Done,
) -> Result<(), RoundError> {
    let me = gateway_field(ctx.owner.header.gateway_id);
    let ttl_ms = ctx.job.window.keep_ms();
    let hot = hot_key(&ctx.job.name, ctx.job.window.index(now));
    for batch in work.chunks(BATCH) {
        if !ctx.owner.keep_on(ctx.stop) {
            return Err(RoundError::Stopped);
        }
        if Instant::now() >= round_deadline {
            done.full = false;
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for it in batch {
            let p = &it.push;
            let key = redis_key(&ctx.job.name, p.window_index, p.fingerprint);
            if it.work.write {
                pipe.cmd("HSET").arg(&key).arg(&me).arg(p.own);
                pipe.cmd("PEXPIRE").arg(&key).arg(ttl_ms);
            }
            if it.work.flag {
                pipe.cmd("RPUSH").arg(&hot).arg(fp_text(p.fingerprint));
                pipe.cmd("PEXPIRE").arg(&hot).arg(ttl_ms);
            }
            pipe.cmd("HGETALL").arg(&key);
        }
        let deadline = round_deadline.min(Instant::now() + Duration::from_millis(BATCH_MS));
        let replies = conn.exec(&pipe, deadline)?;
        settle_batch(ctx, st, batch, replies, &me, now, done);
        if let Some(last) = batch.last() {
            st.cursor = last.push.slot.wrapping_add(1);
        }
    }
    Ok(())
}

/// Whether the next two replies are integers (a write went through).
fn ints(replies: &mut impl Iterator<Item = Value>, n: usize) -> bool {
    (0..n).fold(true, |ok, _| {
        matches!(replies.next(), Some(Value::Int(_))) && ok
    })
}

/// Settles each client of a batch whose replies are good; counts the others.
fn settle_batch(
    ctx: &RoundCtx<'_>,
    st: &mut RoundState,
    batch: &[Item],
    replies: Vec<Value>,
    me: &str,
    now: u64,
    done: &mut Done,
) {
    let mut replies = replies.into_iter();
    let header = ctx.owner.header;
    let (mut pushed, mut read, mut received, mut bad) = (0u64, 0u64, 0i64, 0u64);
    for it in batch {
        let p = &it.push;
        let wrote = !it.work.write || ints(&mut replies, 2);
        if it.work.flag {
            if ints(&mut replies, 2) {
                st.hot.flagged(p.fingerprint);
            } else {
                bad += 1;
            }
        }
        let reply = replies.next();
        let stored = reply.as_ref().and_then(fields);
        match (wrote, stored) {
            (true, Some(f)) => {
                let s = shares(f.iter().map(|(k, v)| (*k, *v)), me);
                received += ctx.ledger.settle(ctx.table, p, s, now).max(0);
                read += 1;
            }
            _ => {
                bad += 1;
                continue;
            }
        }
        pushed += u64::from(it.work.write);
    }
    header.sync_keys_pushed.fetch_add(pushed, Ordering::Relaxed);
    header.sync_err_key.fetch_add(bad, Ordering::Relaxed);
    let stats = &header.stats;
    stats.read_total.fetch_add(read, Ordering::Relaxed);
    stats.received.fetch_add(received as u64, Ordering::Relaxed);
    stats.flagged.store(st.hot.len() as u64, Ordering::Relaxed);
    done.pushed += pushed;
    done.read += read;
}

/// Reads what is new of window `index`'s hot list.
fn read_hot(
    conn: &mut Link,
    ctx: &RoundCtx<'_>,
    st: &mut RoundState,
    index: u64,
) -> Result<(), RoundError> {
    st.hot.roll(index);
    let mut pipe = redis::pipe();
    pipe.cmd("LRANGE")
        .arg(hot_key(&ctx.job.name, index))
        .arg(st.hot.offset())
        .arg(-1);
    let deadline = Instant::now() + Duration::from_millis(BATCH_MS);
    let replies = conn.exec(&pipe, deadline)?;
    match replies.first() {
        Some(Value::Array(items)) => {
            // false: the list lost entries (read again from 0 next round).
            let _ = st.hot.absorb(items.iter().filter_map(bytes));
        }
        // An error reply (an ACL without LRANGE, a key of another type):
        // counted; the round goes on with what is known.
        _ => key_error(ctx),
    }
    let stats = &ctx.owner.header.stats;
    stats.flagged.store(st.hot.len() as u64, Ordering::Relaxed);
    Ok(())
}

/// At most once per `FLEET_MS`: writes this gateway's profile to the
/// fleet hash, reads the hash, and records the fleet it shows; removes
/// fields of gateways gone for 10 minutes. Times are Redis's `TIME`.
fn fleet(
    conn: &mut Link,
    ctx: &RoundCtx<'_>,
    st: &mut RoundState,
    now: u64,
) -> Result<(), RoundError> {
    if st
        .fleet_at
        .is_some_and(|t| t.elapsed() < Duration::from_millis(FLEET_MS))
    {
        return Ok(());
    }
    let key = fleet_key(&ctx.job.name);
    let me = gateway_field(ctx.owner.header.gateway_id);
    // Ages are Redis's (`TIME`): a gateway whose clock is off neither ages
    // the others' profiles nor its own.
    let offset = match st.redis_offset {
        Some(o) => o,
        None => redis_offset(conn, now)?,
    };
    let mut pipe = redis::pipe();
    pipe.cmd("TIME");
    pipe.cmd("HSET")
        .arg(&key)
        .arg(&me)
        .arg(ctx.job.profile.encode(shifted(now, offset)));
    pipe.cmd("PEXPIRE").arg(&key).arg(FLEET_TTL_MS);
    pipe.cmd("HGETALL").arg(&key);
    let deadline = Instant::now() + Duration::from_millis(BATCH_MS);
    let replies = conn.exec(&pipe, deadline)?;
    let redis_now = replies.first().and_then(time_ms);
    st.redis_offset = redis_now.map(|t| now as i64 - t as i64).or(Some(offset));
    let now = redis_now.unwrap_or(shifted(now, offset));
    if !matches!(replies.get(1), Some(Value::Int(_))) {
        key_error(ctx);
    }
    let Some(f) = replies.get(3).and_then(fields) else {
        return Ok(());
    };
    let v = view(f.iter().copied(), &me, &ctx.job.profile, now);
    ctx.owner
        .header
        .stats
        .set_fleet(v.peers, v.mismatched, v.diff);
    st.fleet_at = Some(Instant::now());
    let old = stale(f.iter().copied(), now);
    if !old.is_empty() {
        let mut del = redis::pipe();
        del.cmd("HDEL").arg(&key).arg(old);
        conn.exec(&del, Instant::now() + Duration::from_millis(BATCH_MS))?;
    }
    Ok(())
}

/// This gateway's clock (`now`, ms) minus Redis's `TIME`, read alone.
fn redis_offset(conn: &mut Link, now: u64) -> Result<i64, RoundError> {
    let mut pipe = redis::pipe();
    pipe.cmd("TIME");
    let replies = conn.exec(&pipe, Instant::now() + Duration::from_millis(BATCH_MS))?;
    Ok(replies
        .first()
        .and_then(time_ms)
        .map_or(0, |t| now as i64 - t as i64))
}

/// `now` (ms) on Redis's clock, `offset` ms behind this gateway's.
fn shifted(now: u64, offset: i64) -> u64 {
    (now as i64).saturating_sub(offset).max(0) as u64
}

/// Deletes the store hashes (current and previous window) of each key
/// reset by `DELETE` since the last round (see `reset.rs`), then forgets
/// its share here. `DEL` is idempotent: on an error the resets are queued
/// again for the next round.
fn reset_keys(conn: &mut Link, ctx: &RoundCtx<'_>, now: u64) -> Result<(), RoundError> {
    let header = ctx.owner.header;
    let fps: Vec<u64> = header
        .resets
        .iter()
        .map(|e| e.swap(0, Ordering::AcqRel))
        .filter(|&fp| fp != 0)
        .collect();
    if fps.is_empty() {
        return Ok(());
    }
    let index = ctx.job.window.index(now);
    let mut pipe = redis::pipe();
    for &fp in &fps {
        for w in [index, index.saturating_sub(1)] {
            pipe.cmd("DEL").arg(redis_key(&ctx.job.name, w, fp));
        }
    }
    let deadline = Instant::now() + Duration::from_millis(BATCH_MS);
    if let Err(e) = conn.exec(&pipe, deadline) {
        for fp in fps {
            let _ = header.resets.iter().any(|e| {
                e.compare_exchange(0, fp, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            });
        }
        return Err(e.into());
    }
    for fp in fps {
        ctx.ledger.forget(ctx.table, fp, now);
    }
    Ok(())
}

/// Counts one command's error reply in a round that goes on.
fn key_error(ctx: &RoundCtx<'_>) {
    let header = ctx.owner.header;
    header.sync_err_key.fetch_add(1, Ordering::Relaxed);
}
