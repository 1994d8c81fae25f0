//! What a sync thread and its rounds share (mod.rs runs the thread,
//! round.rs and fleet_overrides.rs the parts of a round): the job, the
//! thread's view of the sync's ownership, the round's context and error,
//! and the reading of an `HGETALL` reply.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rate_limit_window_core::cluster::fleet::Profile;
use rate_limit_window_core::cluster::{claim, Claim, Ledger};
use rate_limit_window_core::{Table, Window};
use redis::Value;

use crate::sync::redis_link::{LinkError, RedisTarget};
use crate::zone::ZoneHeader;

/// How often a waiting thread, or a napping owner, checks the stop flag
/// and the ownership words, and the owner beats its heartbeat (ms).
pub(crate) const POLL_MS: u64 = 50;

/// What a sync thread needs; all of it outlives the thread (the cycle's
/// configuration and the shared zone stay until the worker exits, or until
/// a single-process reload, and `stop_all` joins the threads before that).
pub(crate) struct Job {
    pub name: String,
    pub target: RedisTarget,
    pub sync_ms: u64,
    pub window: Window,
    /// What this gateway publishes to the fleet hash (never the secret).
    pub profile: Profile,
    /// `secret=`: the key of the MAC of the fleet's override values
    /// (never written anywhere).
    pub secret: Vec<u8>,
    pub table: &'static Table<'static>,
    pub header: &'static ZoneHeader,
}

/// Wall-clock epoch ms (the sync thread cannot read nginx's cached clock).
pub(crate) fn epoch_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// How long an owner may stay silent before a newer generation takes the
/// sync over (it died without releasing it), in ms. An owner beats at
/// least every second (between batches, and every `POLL_MS` while it
/// waits), so a live one is never replaced.
fn lease_timeout_ms(sync_ms: u64) -> u64 {
    (sync_ms * 5).max(3_000)
}

/// This thread's view of the ownership words.
pub(crate) struct Owner<'h> {
    pub header: &'h ZoneHeader,
    /// This thread's generation.
    me: u64,
    timeout_ms: u64,
}

impl<'h> Owner<'h> {
    /// A new sync thread's view: draws the next generation from the
    /// header and asks the current owner to hand the sync over.
    pub fn new(header: &'h ZoneHeader, sync_ms: u64) -> Self {
        let owner = Owner {
            header,
            me: header.sync_generation.fetch_add(1, Ordering::AcqRel) + 1,
            timeout_ms: lease_timeout_ms(sync_ms),
        };
        header.sync_handover.fetch_max(owner.me, Ordering::AcqRel);
        owner
    }

    /// Holds, takes, waits for, or has lost the sync.
    pub fn claim(&self) -> Claim {
        let h = self.header;
        let now = epoch_ms();
        let c = claim(
            h.sync_owner.load(Ordering::Acquire),
            h.sync_handover.load(Ordering::Acquire),
            h.sync_heartbeat_ms.load(Ordering::Acquire),
            self.me,
            now,
            self.timeout_ms,
        );
        match c {
            Claim::Take { from } => {
                let taken = h
                    .sync_owner
                    .compare_exchange(from, self.me, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok();
                if taken {
                    h.sync_heartbeat_ms.store(now, Ordering::Release);
                    Claim::Held
                } else {
                    Claim::Wait
                }
            }
            Claim::Held => {
                h.sync_heartbeat_ms.store(now, Ordering::Release);
                Claim::Held
            }
            other => other,
        }
    }

    /// Gives the sync up if this thread holds it.
    pub fn release(&self) {
        let _ = self.header.sync_owner.compare_exchange(
            self.me,
            0,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// True while the thread should go on: not stopped, and still the
    /// owner (beating the heartbeat).
    pub fn keep_on(&self, stop: &AtomicBool) -> bool {
        !stop.load(Ordering::Relaxed) && self.claim() == Claim::Held
    }

    /// Sleeps `ms` as the owner, beating and checking every `POLL_MS`.
    /// Returns false on stop or lost ownership.
    pub fn nap(&self, ms: u64, stop: &AtomicBool) -> bool {
        let until = Instant::now() + Duration::from_millis(ms);
        loop {
            if !self.keep_on(stop) {
                return false;
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return true;
            }
            std::thread::sleep(left.min(Duration::from_millis(POLL_MS)));
        }
    }
}

/// Why a round ended early.
pub(crate) enum RoundError {
    Link(LinkError),
    /// Stopped, or lost the ownership, between batches.
    Stopped,
}

impl From<LinkError> for RoundError {
    fn from(e: LinkError) -> Self {
        RoundError::Link(e)
    }
}

/// What a round works on.
pub(crate) struct RoundCtx<'a> {
    pub table: &'a Table<'static>,
    pub ledger: &'a Ledger<'static>,
    pub job: &'a Job,
    pub owner: &'a Owner<'a>,
    pub stop: &'a AtomicBool,
}

pub(crate) fn bytes(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b.as_slice()),
        _ => None,
    }
}

/// The `(field, value)` pairs of an `HGETALL` reply (RESP2 or RESP3).
pub(crate) fn fields(v: &Value) -> Option<Vec<(&[u8], &[u8])>> {
    match v {
        Value::Array(items) => items
            .chunks(2)
            .map(|kv| Some((bytes(&kv[0])?, bytes(kv.get(1)?)?)))
            .collect(),
        Value::Map(pairs) => pairs
            .iter()
            .map(|(k, v)| Some((bytes(k)?, bytes(v)?)))
            .collect(),
        _ => None,
    }
}

/// A `TIME` reply in ms (UTC epoch, Redis's clock).
pub(crate) fn time_ms(v: &Value) -> Option<u64> {
    let Value::Array(a) = v else {
        return None;
    };
    let num = |v: &Value| -> Option<u64> { core::str::from_utf8(bytes(v)?).ok()?.parse().ok() };
    let (secs, micros) = (num(a.first()?)?, num(a.get(1)?)?);
    Some(secs * 1000 + micros / 1000)
}
