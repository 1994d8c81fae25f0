//! Overrides of a `redis=` zone shared by the fleet: one order from Redis,
//! incremental reads, healing (the keys, values and scripts are the core's
//! `overrides::remote`, the table's side and the decisions
//! `overrides::order`; docs/gateways.md, "Overrides across the fleet").
//!
//! A change made here (an API `PUT` or `DELETE`, a reset that lifts a ban,
//! a ban) applies to the table at once as a local change, and its id is
//! queued in the zone header (`ovr_pending`, one CAS, never a wait on
//! Redis). Worker 0's overrides thread (beside the count rounds' thread,
//! with its own connection and its own time budget: it never delays nor
//! fails a count round) runs a step every `sync=`:
//!
//! 1. reads the order (one script: epoch, sequence, Redis's `TIME`, the
//!    changes after the last one seen, a bounded number) and applies them;
//! 2. writes the local changes (queued, and those a slow scan of the table
//!    finds not yet acknowledged: a write that failed is written again),
//!    each through the write script, which gives it the fleet's next
//!    sequence (or, sent again, the one it got); the reply acknowledges it
//!    here;
//! 3. a new gateway, or one that fell behind the trimmed log, reads the
//!    snapshot hash in pages across rounds, then removes what it holds of
//!    the fleet that the snapshot no longer has, and follows the log from
//!    where the snapshot began; a gateway that finds Redis lost what it saw
//!    (a new epoch, the sequence went back) first writes its state back
//!    (the heal script: never over a change made since), then reads the
//!    snapshot.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rate_limit_window_core::overrides::order::{is_local, judge, Held, Next, RedisClock, Seen};
use rate_limit_window_core::overrides::remote::{
    body, field, parse_log, parse_value, Keys, MacKey, Origin, Read, DEDUPE_MS, HEAL, KEY_TTL_MS,
    LOG_MAX, WRITE,
};
use rate_limit_window_core::overrides::{Applied, Overrides};

use rate_limit_window_core::cluster::Claim;

use crate::sync::ctx::{epoch_ms, Job, RoundCtx, POLL_MS};
use crate::sync::ovr_calls::{self, number, page_call, page_reply, read_call, read_reply, Call};
use crate::sync::redis_link::{Link, LinkError};
use crate::zone::ZoneConf;

/// The step's budget per round (ms), `sync=` within these bounds: no
/// call starts after it (but the first of each part), so a step takes at
/// most this and a few calls ([`CALL_MS`]), whatever Redis does.
const BUDGET_MS: (u64, u64) = (100, 500);
/// Longest one call may wait (ms): the overrides' own, longer than the
/// count rounds' 500 ms batches (this thread never delays a count), so a
/// Redis 700 ms or more away still carries overrides; a call that times
/// out is made again by a later step (reads and writes are idempotent).
/// The stop flag is checked on every read of a plain or TLS link
/// (`raw_conn.rs`): a quit never waits for it.
const CALL_MS: u64 = 3_000;
/// Longest a connect may take (ms), handshake and login included.
const CONNECT_MS: u64 = 3_000;
/// Changes read from the log per call.
const READ_MAX: usize = 1_000;
/// Writes per pipeline.
const PUSH_MAX: usize = 1_000;
/// Slots of the table a round scans for unacknowledged changes.
const SCAN_SLOTS: usize = 65_536;
/// Fields per page of the snapshot.
const PAGE_COUNT: usize = 2_000;
/// States written back per pipeline when healing (slots scanned).
const HEAL_SLOTS: usize = 4_096;
/// Acknowledged changes watched for in the log at most.
const ACKED_MAX: usize = 65_536;
/// After a failed step, the next waits this long (ms).
const RETRY_MS: u64 = 500;
/// How often the fleet's states that found no room here are read again
/// (ms), [`MISFITS_MAX`] at most kept.
const MISFIT_MS: u64 = 1_000;
const MISFITS_MAX: usize = 65_536;

/// The overrides' thread (beside the count rounds, see `mod.rs`): a step
/// every `sync=` while this process owns the sync, until `stop` or `done`
/// (the count rounds ended: stop, or the sync went to a newer process).
pub(crate) fn run(ctx: &RoundCtx<'_>, done: &AtomicBool, stop: &Arc<AtomicBool>) {
    let mut sync = OvrSync::new(ctx.job, stop.clone());
    let ended = || ctx.stop.load(Ordering::Relaxed) || done.load(Ordering::Relaxed);
    while !ended() {
        let started = Instant::now();
        if ctx.owner.claim() == Claim::Held {
            sync.step(ctx);
        }
        let interval = Duration::from_millis(ctx.job.sync_ms.max(POLL_MS));
        while !ended() && started.elapsed() < interval {
            let left = interval.saturating_sub(started.elapsed());
            std::thread::sleep(left.min(Duration::from_millis(POLL_MS)));
        }
    }
}

/// Queues `id` (a fingerprint or a range's id) for the fleet when `zone`
/// has `redis=`: `"scheduled"` (when the queue is full the change is
/// written all the same, found by the thread's scan of the table for
/// changes Redis has not acknowledged: only later); `null` for a zone
/// without `redis=`. Called after the change was written to the table.
pub(crate) fn share(zone: &ZoneConf, id: u64) -> &'static str {
    if zone.redis.is_none() {
        return "null";
    }
    let Some(header) = zone.header() else {
        return "\"not shared\"";
    };
    // Full: the scan finds it (see above).
    let _ = crate::sync::enqueue(&header.ovr_pending, id);
    "\"scheduled\""
}

/// Where a gateway is in the order.
enum Phase {
    /// Applying the log after `pos`.
    Follow,
    /// Writing its state back (from slot `from`), as known in epoch
    /// `epoch`.
    Heal { from: usize, epoch: String },
    /// Reading the snapshot: the `HSCAN` cursor, the sequence when it
    /// began (None: at the next read), the ids it held, and whether it
    /// replaces every state of the fleet here (after a write-back: the
    /// sequences here are of an order Redis lost).
    Boot {
        cursor: String,
        s0: Option<u64>,
        seen: HashSet<u64>,
        adopt: bool,
    },
}

/// The override step's state, kept by the sync thread across rounds.
pub(crate) struct OvrSync {
    link: Option<Link>,
    /// The thread's stop flag, checked on every read of the link.
    stop: Arc<AtomicBool>,
    keys: Keys,
    mac: MacKey,
    me: u64,
    shas: ovr_calls::Shas,
    clock: Option<RedisClock>,
    epoch: Option<String>,
    pos: u64,
    phase: Phase,
    scan_from: usize,
    retry_at: Option<Instant>,
    /// This gateway's changes acknowledged and not yet seen in the log:
    /// (id, sequence).
    acked: Vec<(u64, u64)>,
    /// The fleet's states read that found no room in the table (a table
    /// full of operators' states), read again every [`MISFIT_MS`] from the
    /// snapshot until they fit, are replaced, or are gone: once operators
    /// make room, the table holds them.
    misfits: HashSet<u64>,
    misfits_at: Option<Instant>,
}

/// One step's context: the table, the round's, the deadline.
struct Step<'a, 'c> {
    o: &'a Overrides<'a>,
    ctx: &'a RoundCtx<'c>,
    deadline: Instant,
}

impl Step<'_, '_> {
    /// A call's wait: each call started within the budget has [`CALL_MS`]
    /// (a Redis far away still answers one).
    fn call_wait(&self) -> Duration {
        Duration::from_millis(CALL_MS)
    }

    fn time_left(&self) -> bool {
        Instant::now() < self.deadline && self.ctx.owner.keep_on(self.ctx.stop)
    }
}

impl OvrSync {
    pub fn new(job: &Job, stop: Arc<AtomicBool>) -> OvrSync {
        OvrSync {
            link: None,
            stop,
            keys: Keys::new(&job.name),
            mac: MacKey::new(job.name.as_bytes(), &job.secret),
            me: job.header.gateway_id,
            shas: ovr_calls::Shas::new(),
            clock: None,
            epoch: None,
            pos: 0,
            phase: Phase::Boot {
                cursor: "0".into(),
                s0: None,
                seen: HashSet::new(),
                adopt: false,
            },
            scan_from: 0,
            retry_at: None,
            acked: Vec::new(),
            misfits: HashSet::new(),
            misfits_at: None,
        }
    }

    /// The step of one round; errors are counted by kind and retried
    /// after [`RETRY_MS`], never passed to the count round.
    pub fn step(&mut self, ctx: &RoundCtx<'_>) {
        let Some(o) = ctx.owner.header.overrides() else {
            return;
        };
        if self.retry_at.is_some_and(|t| Instant::now() < t) {
            return;
        }
        let s = Step {
            o: &o,
            ctx,
            deadline: Instant::now()
                + Duration::from_millis(ctx.job.sync_ms.clamp(BUDGET_MS.0, BUDGET_MS.1)),
        };
        if let Err(e) = self.work(&s) {
            self.link = None;
            crate::sync::count_error(ctx.owner.header, &e);
            self.retry_at = Some(Instant::now() + Duration::from_millis(RETRY_MS));
        }
    }

    fn work(&mut self, s: &Step<'_, '_>) -> Result<(), LinkError> {
        if self.link.as_ref().is_none_or(Link::is_broken) {
            let d = Instant::now() + Duration::from_millis(CONNECT_MS);
            self.link = Some(Link::open_watched(&s.ctx.job.target, d, &self.stop)?);
        }
        let mut link = self.link.take().expect("just opened");
        let r = self.read(&mut link, s).and_then(|()| {
            self.push(&mut link, s)?;
            self.phase_work(&mut link, s)?;
            self.retry_misfits(&mut link, s)
        });
        if let Some(d) = link.take_denied() {
            crate::sync::denied::note(s.ctx.owner.header, d);
        }
        self.link = Some(link);
        r
    }

    /// Reads the order, and applies it when following (more calls while
    /// full pages come and time is left).
    fn read(&mut self, link: &mut Link, s: &Step<'_, '_>) -> Result<(), LinkError> {
        loop {
            let count = if matches!(self.phase, Phase::Follow) {
                READ_MAX
            } else {
                0
            };
            let call = read_call(&self.keys, &new_epoch(self.me), self.pos, count);
            let before = epoch_ms();
            let replies = ovr_calls::run(link, &self.shas, &[call], s.call_wait())?;
            let Some(r) = replies.first().and_then(read_reply) else {
                key_error(s.ctx, 1);
                return Ok(());
            };
            self.clock = Some(RedisClock::measure(r.time.0, r.time.1, before, epoch_ms()));
            let seen = Seen {
                epoch: r.epoch,
                seq: r.seq,
                cut: r.cut,
                kept: r.kept,
            };
            let next = judge(self.epoch.as_deref(), self.pos, &seen);
            let full = r.items.len() >= READ_MAX;
            let follow = self.on_read(s, next, &seen, &r.items);
            if !(follow && full && s.time_left()) {
                return Ok(());
            }
        }
    }

    /// What a read changes; true when it applied changes of the log.
    fn on_read(&mut self, s: &Step<'_, '_>, next: Next, seen: &Seen<'_>, items: &[&[u8]]) -> bool {
        // While writing back or reading the snapshot, only a new epoch
        // starts over (the position is the old order's until then).
        let new_epoch = self.epoch.as_deref().is_some_and(|e| e != seen.epoch);
        let following = matches!(self.phase, Phase::Follow);
        if next == Next::Heal && (following || new_epoch) {
            self.start_heal(s, seen);
            return false;
        }
        match &mut self.phase {
            Phase::Boot { s0, .. } => {
                s0.get_or_insert(seen.seq);
                self.epoch = Some(seen.epoch.to_owned());
                false
            }
            Phase::Heal { .. } => false,
            Phase::Follow if next == Next::Bootstrap => {
                self.phase = Phase::Boot {
                    cursor: "0".into(),
                    s0: Some(seen.seq),
                    seen: HashSet::new(),
                    adopt: false,
                };
                false
            }
            Phase::Follow => {
                self.follow(s, seen.seq, items);
                true
            }
        }
    }

    /// Redis lost what this gateway saw: write its state back, then read
    /// the snapshot. The epoch it knew keeps the write-back from replacing
    /// any change made since.
    fn start_heal(&mut self, s: &Step<'_, '_>, seen: &Seen<'_>) {
        let known = self
            .epoch
            .replace(seen.epoch.to_owned())
            .unwrap_or_default();
        let epoch = match &self.phase {
            // Lost again while writing back: start over, as known before.
            Phase::Heal { epoch, .. } => epoch.clone(),
            _ => known,
        };
        s.o.count_heal();
        // The write-back writes every state again.
        self.acked.clear();
        self.phase = Phase::Heal { from: 0, epoch };
    }

    /// Applies the log's changes up to sequence `seq` (a member numbered
    /// above the sequence is not the fleet's: skipped).
    fn follow(&mut self, s: &Step<'_, '_>, seq: u64, items: &[&[u8]]) {
        let (now, mut ignored) = (epoch_ms(), 0);
        for m in items {
            match parse_log(&self.mac, m) {
                Ok(r) if r.seq <= seq => {
                    if r.origin.gateway == self.me {
                        self.acked.retain(|&(id, q)| (id, q) != (r.id, r.seq));
                    }
                    self.apply(s.o, &r, now);
                    self.pos = self.pos.max(r.seq);
                }
                Ok(_) => ignored += 1,
                Err(_) => ignored += 1,
            }
        }
        if items.len() < READ_MAX {
            // Everything up to `seq` was read (numbers skipped by a raised
            // sequence, members not ours included).
            self.pos = self.pos.max(seq);
        }
        s.o.count_ignored(ignored);
        self.lost_acks(s.o, now);
    }

    /// This gateway's changes acknowledged at a sequence the log went past
    /// without them: Redis lost them after it answered (a restart from a
    /// copy saved before): they become local changes again, written again.
    fn lost_acks(&mut self, o: &Overrides<'_>, now: u64) {
        let pos = self.pos;
        let (lost, kept): (Vec<_>, Vec<_>) = self.acked.drain(..).partition(|&(_, q)| q <= pos);
        self.acked = kept;
        for (id, q) in lost {
            let held = o.versioned(id);
            if held.version != Some(q) {
                continue;
            }
            match held.entry {
                Some(e) => {
                    let _ = o.set(e, now);
                }
                None => {
                    o.remove(id, now);
                }
            }
        }
    }

    /// Applies one state read: this gateway's own change acknowledges its
    /// local change; any other applies over an older sequence here. An
    /// entry ended by Redis's time applies as a removal. A state that
    /// finds no room is kept to read again ([`Self::retry_misfits`]).
    fn apply(&mut self, o: &Overrides<'_>, r: &Read, now: u64) {
        if r.origin.gateway == self.me && o.ack(r.id, r.origin.change, r.seq) {
            self.misfits.remove(&r.id);
            return;
        }
        let clock = self.clock.unwrap_or_default();
        let entry = r
            .entry
            .map(|e| clock.to_local(e))
            .filter(|e| !e.expired(now));
        let done = if matches!(self.phase, Phase::Boot { adopt: true, .. }) {
            o.adopt_as(r.id, entry, r.seq, now)
        } else {
            o.apply_remote_as(r.id, entry, r.seq, now)
        };
        if done != Applied::Full {
            self.misfits.remove(&r.id);
        } else if self.misfits.len() < MISFITS_MAX {
            self.misfits.insert(r.id);
        }
    }

    /// Reads the fleet's states that found no room here again (every
    /// [`MISFIT_MS`], [`PUSH_MAX`] a call) and applies them: each fits once
    /// operators removed enough (counted again while it does not); one
    /// gone from the snapshot is forgotten (its removal was read).
    fn retry_misfits(&mut self, link: &mut Link, s: &Step<'_, '_>) -> Result<(), LinkError> {
        let due = self
            .misfits_at
            .is_none_or(|t| t.elapsed() >= Duration::from_millis(MISFIT_MS));
        if self.misfits.is_empty() || !due || !matches!(self.phase, Phase::Follow) {
            return Ok(());
        }
        self.misfits_at = Some(Instant::now());
        let ids: Vec<u64> = self.misfits.iter().copied().take(PUSH_MAX).collect();
        let mut pipe = redis::pipe();
        for &id in &ids {
            pipe.cmd("HGET").arg(&self.keys.hash).arg(field(id));
        }
        let replies = link.exec(&pipe, Instant::now() + s.call_wait())?;
        let now = epoch_ms();
        for (&id, v) in ids.iter().zip(&replies) {
            let read = crate::sync::ctx::bytes(v)
                .and_then(|b| parse_value(&self.mac, field(id).as_bytes(), b).ok());
            match read {
                Some(r) => self.apply(s.o, &r, now),
                None => {
                    self.misfits.remove(&id);
                }
            }
        }
        Ok(())
    }

    /// Writes the local changes not yet acknowledged (see the module doc).
    fn push(&mut self, link: &mut Link, s: &Step<'_, '_>) -> Result<(), LinkError> {
        let Some(clock) = self.clock else {
            return Ok(());
        };
        let q = &s.ctx.owner.header.ovr_pending;
        let queued: Vec<u64> = q
            .iter()
            .filter(|e| e.load(Ordering::Relaxed) != 0)
            .map(|e| e.swap(0, Ordering::AcqRel))
            .filter(|&id| id != 0)
            .collect();
        let mut todo: Vec<Held> = Vec::new();
        for &id in &queued {
            let v = s.o.versioned(id);
            match v.version {
                Some(version) if is_local(version) => todo.push(Held {
                    id,
                    entry: v.entry,
                    version,
                }),
                Some(_) => {}
                // A change in flight: next round.
                None => {
                    crate::sync::enqueue(q, id);
                }
            }
        }
        let (found, next) =
            s.o.held(self.scan_from, SCAN_SLOTS, |h| is_local(h.version));
        self.scan_from = next;
        let known: HashSet<u64> = todo.iter().map(|h| h.id).collect();
        todo.extend(found.into_iter().filter(|h| !known.contains(&h.id)));
        for (i, chunk) in todo.chunks(PUSH_MAX).enumerate() {
            // The first always goes (a Redis far away takes the budget
            // with one call); more while time is left.
            if i > 0 && !s.time_left() {
                break;
            }
            if let Err(e) = self.write(link, s, chunk, clock) {
                for id in &queued {
                    crate::sync::enqueue(q, *id);
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// Writes `chunk` and acknowledges each change by the sequence it got.
    fn write(
        &mut self,
        link: &mut Link,
        s: &Step<'_, '_>,
        chunk: &[Held],
        clock: RedisClock,
    ) -> Result<(), LinkError> {
        let calls: Vec<Call> = chunk.iter().map(|h| self.write_call(h, clock)).collect();
        let replies = ovr_calls::run(link, &self.shas, &calls, s.call_wait())?;
        let mut bad = 0;
        let mut recheck = Vec::new();
        for (h, r) in chunk.iter().zip(&replies) {
            match number(r).filter(|&n| n > 0) {
                Some(seq) => {
                    if s.o.ack(h.id, h.version, seq) && self.acked.len() < ACKED_MAX {
                        self.acked.push((h.id, seq));
                    }
                    // Sent again: it ran before, and later changes of the
                    // client may have been read past meanwhile.
                    if seq <= self.pos {
                        recheck.push(h.id);
                    }
                }
                // A ban refused by an operator's state in Redis: that
                // state is read and applied over it here.
                None if refused(r) => recheck.push(h.id),
                // READONLY, LOADING, OOM...: it stays a local change,
                // written again by a later round.
                None => bad += 1,
            }
        }
        key_error(s.ctx, bad);
        self.recheck(link, s, &recheck)
    }

    fn write_call(&self, h: &Held, clock: RedisClock) -> Call {
        let (origin, mut keys, mut args) = self.both_writes(h, clock, h.version);
        keys.push(self.keys.dedupe(origin));
        args.extend([new_epoch(self.me), DEDUPE_MS.to_string()]);
        Call {
            script: WRITE,
            keys,
            args,
        }
    }

    /// What the two writes share: the change's origin (`change`: its
    /// number, 0 for a write-back), the four keys, and the field, body,
    /// removal flag, log length and keys' lifetime.
    fn both_writes(
        &self,
        h: &Held,
        clock: RedisClock,
        change: u64,
    ) -> (Origin, Vec<String>, Vec<String>) {
        let origin = Origin {
            gateway: self.me,
            change,
        };
        let e = h.entry.map(|e| clock.to_redis(e));
        let k = &self.keys;
        let keys = vec![
            k.hash.clone(),
            k.seq.clone(),
            k.log.clone(),
            k.epoch.clone(),
        ];
        let args = vec![
            field(h.id),
            body(&self.mac, h.id, e.as_ref(), origin),
            u8::from(e.is_none()).to_string(),
            LOG_MAX.to_string(),
            KEY_TTL_MS.to_string(),
        ];
        (origin, keys, args)
    }

    /// Reads the snapshot's state of `ids` again and applies it.
    fn recheck(&mut self, link: &mut Link, s: &Step<'_, '_>, ids: &[u64]) -> Result<(), LinkError> {
        if ids.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for &id in ids {
            pipe.cmd("HGET").arg(&self.keys.hash).arg(field(id));
        }
        let replies = link.exec(&pipe, Instant::now() + s.call_wait())?;
        let now = epoch_ms();
        for (&id, v) in ids.iter().zip(&replies) {
            if let Some(b) = crate::sync::ctx::bytes(v) {
                if let Ok(r) = parse_value(&self.mac, field(id).as_bytes(), b) {
                    self.apply(s.o, &r, now);
                }
            }
        }
        Ok(())
    }

    /// The heal's or the snapshot's pages: one, then more while time is
    /// left.
    fn phase_work(&mut self, link: &mut Link, s: &Step<'_, '_>) -> Result<(), LinkError> {
        loop {
            match &self.phase {
                Phase::Follow => return Ok(()),
                Phase::Heal { .. } => self.heal_page(link, s)?,
                Phase::Boot { s0: None, .. } => return Ok(()),
                Phase::Boot { .. } => self.boot_page(link, s)?,
            }
            if !s.time_left() {
                return Ok(());
            }
        }
    }

    /// Writes back the states of the next [`HEAL_SLOTS`] slots.
    fn heal_page(&mut self, link: &mut Link, s: &Step<'_, '_>) -> Result<(), LinkError> {
        let Phase::Heal { from, epoch } = &self.phase else {
            return Ok(());
        };
        let clock = self.clock.unwrap_or_default();
        let (held, next) = s.o.held(*from, HEAL_SLOTS, |h| {
            !is_local(h.version) && (h.entry.is_some() || h.version > 0)
        });
        let calls: Vec<Call> = held
            .iter()
            .map(|h| self.heal_call(h, clock, epoch))
            .collect();
        let replies = ovr_calls::run(link, &self.shas, &calls, s.call_wait())?;
        key_error(
            s.ctx,
            replies.iter().filter(|r| number(r).is_none()).count() as u64,
        );
        self.phase = if next == 0 {
            // Then the snapshot, from the sequence at the next read.
            Phase::Boot {
                cursor: "0".into(),
                s0: None,
                seen: HashSet::new(),
                adopt: true,
            }
        } else {
            Phase::Heal {
                from: next,
                epoch: epoch.clone(),
            }
        };
        Ok(())
    }

    fn heal_call(&self, h: &Held, clock: RedisClock, epoch: &str) -> Call {
        let (_, keys, mut args) = self.both_writes(h, clock, 0);
        args.extend([epoch.to_owned(), h.version.to_string()]);
        Call {
            script: HEAL,
            keys,
            args,
        }
    }

    /// Reads one page of the snapshot; after the last, removes what the
    /// snapshot no longer holds and follows the log.
    fn boot_page(&mut self, link: &mut Link, s: &Step<'_, '_>) -> Result<(), LinkError> {
        let Phase::Boot { cursor, .. } = &self.phase else {
            return Ok(());
        };
        let call = page_call(&self.keys, cursor, PAGE_COUNT);
        let replies = ovr_calls::run(link, &self.shas, &[call], s.call_wait())?;
        let Some((next, pairs)) = replies.first().and_then(page_reply) else {
            key_error(s.ctx, 1);
            // Not readable (another type, scripts refused): follow the log.
            self.end_boot(s, false);
            return Ok(());
        };
        let now = epoch_ms();
        let mut ignored = 0;
        let mut got = Vec::with_capacity(pairs.len());
        for (f, v) in pairs {
            match parse_value(&self.mac, f, v) {
                Ok(r) => {
                    self.apply(s.o, &r, now);
                    got.push(r.id);
                }
                Err(_) => ignored += 1,
            }
        }
        s.o.count_ignored(ignored);
        if let Phase::Boot { cursor, seen, .. } = &mut self.phase {
            seen.extend(got);
            *cursor = next;
            if cursor == "0" {
                self.end_boot(s, true);
            }
        }
        Ok(())
    }

    /// The snapshot was read: what this gateway holds of the fleet (a
    /// sequence below the snapshot's start; after a write-back, any) and
    /// the snapshot lacks was removed or ended meanwhile (`sweep`); then
    /// the log from the start.
    fn end_boot(&mut self, s: &Step<'_, '_>, sweep: bool) {
        let phase = std::mem::replace(&mut self.phase, Phase::Follow);
        let Phase::Boot {
            s0: Some(s0),
            seen,
            adopt,
            ..
        } = phase
        else {
            return;
        };
        if sweep {
            let now = epoch_ms();
            let gone = |h: &Held| {
                h.entry.is_some()
                    && !is_local(h.version)
                    && !seen.contains(&h.id)
                    && (adopt || (h.version > 0 && h.version < s0))
            };
            let mut from = 0;
            loop {
                let (held, next) = s.o.held(from, SCAN_SLOTS, gone);
                for h in held {
                    s.o.adopt(h.id, None, s0, now);
                }
                if next == 0 {
                    break;
                }
                from = next;
            }
        }
        // Its own changes up to `s0` were in the snapshot, or are not
        // watched for any more.
        self.acked.retain(|&(_, q)| q > s0);
        self.pos = s0;
    }
}

/// A fresh epoch word, set only where Redis has none.
fn new_epoch(me: u64) -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    format!("{:016x}", t ^ me.rotate_left(17))
}

/// Counts `n` calls' error replies in a step that went on.
fn key_error(ctx: &RoundCtx<'_>, n: u64) {
    ctx.owner
        .header
        .sync_err_key
        .fetch_add(n, Ordering::Relaxed);
}

/// Whether the write script refused a ban (it answers minus the sequence
/// of the operator's state that stands; see [`WRITE`]).
fn refused(v: &redis::Value) -> bool {
    matches!(v, redis::Value::Int(n) if *n < 0)
}
