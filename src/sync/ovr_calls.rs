//! The override sync's Redis calls: its scripts run by name (`EVALSHA`,
//! falling back to `EVAL` once on a server that does not hold them, a
//! restarted or failed-over one), and the replies of the reads read.
//! Every script is idempotent (see `core/src/overrides/remote.rs`), so a
//! pipeline sent again after `NOSCRIPT` changes nothing twice.

use std::time::{Duration, Instant};

use rate_limit_window_core::overrides::remote::{
    Keys, Script, HEAL, PAGE, READ, TOMBSTONE_MS, WRITE,
};
use redis::Value;

use crate::sync::ctx::bytes;
use crate::sync::redis_link::{Link, LinkError};

/// One script call.
pub(crate) struct Call {
    pub script: Script,
    pub keys: Vec<String>,
    pub args: Vec<String>,
}

/// The SHA1 names of the scripts, computed once per sync thread.
pub(crate) struct Shas {
    write: String,
    heal: String,
    read: String,
    page: String,
}

impl Shas {
    pub fn new() -> Shas {
        Shas {
            write: WRITE.sha(),
            heal: HEAL.sha(),
            read: READ.sha(),
            page: PAGE.sha(),
        }
    }

    fn of(&self, s: &Script) -> &str {
        [
            (WRITE.text, &self.write),
            (HEAL.text, &self.heal),
            (READ.text, &self.read),
        ]
        .iter()
        .find(|(t, _)| *t == s.text)
        .map_or(&self.page, |(_, sha)| sha)
    }
}

/// Runs `calls` in one pipeline, each attempt within `wait`: one reply
/// each.
pub(crate) fn run(
    link: &mut Link,
    shas: &Shas,
    calls: &[Call],
    wait: Duration,
) -> Result<Vec<Value>, LinkError> {
    if calls.is_empty() {
        return Ok(Vec::new());
    }
    let replies = link.exec(&pipeline(shas, calls, true), Instant::now() + wait)?;
    if !replies.iter().any(missing_script) {
        return Ok(replies);
    }
    link.exec(&pipeline(shas, calls, false), Instant::now() + wait)
}

fn pipeline(shas: &Shas, calls: &[Call], by_sha: bool) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    for c in calls {
        let cmd = if by_sha {
            pipe.cmd("EVALSHA").arg(shas.of(&c.script))
        } else {
            pipe.cmd("EVAL").arg(c.script.text)
        };
        cmd.arg(c.keys.len()).arg(&c.keys).arg(&c.args);
    }
    pipe
}

/// `NOSCRIPT` (a server, or a cluster node, that has not run the script
/// yet), or `Nil` (no script returns nil).
fn missing_script(v: &Value) -> bool {
    match v {
        Value::ServerError(e) => e.code() == "NOSCRIPT",
        Value::Nil => true,
        _ => false,
    }
}

/// The text of a bulk or simple string reply.
fn text(v: &Value) -> Option<&str> {
    match v {
        Value::SimpleString(s) => Some(s),
        _ => bytes(v).and_then(|b| core::str::from_utf8(b).ok()),
    }
}

/// A number reply (an integer, or its text).
pub(crate) fn number(v: &Value) -> Option<u64> {
    match v {
        Value::Int(n) => u64::try_from(*n).ok(),
        _ => text(v)?.parse().ok(),
    }
}

/// What the read script answered.
pub(crate) struct ReadReply<'v> {
    pub epoch: &'v str,
    pub seq: u64,
    pub cut: u64,
    pub kept: bool,
    pub time: (u64, u64),
    pub items: Vec<&'v [u8]>,
}

/// The read script's call: from after `pos`, `count` changes at most.
pub(crate) fn read_call(keys: &Keys, new_epoch: &str, pos: u64, count: usize) -> Call {
    Call {
        script: READ,
        keys: vec![keys.epoch.clone(), keys.seq.clone(), keys.log.clone()],
        args: vec![new_epoch.to_owned(), pos.to_string(), count.to_string()],
    }
}

/// Reads the read script's reply (None: not one).
pub(crate) fn read_reply(v: &Value) -> Option<ReadReply<'_>> {
    let Value::Array(a) = v else {
        return None;
    };
    let [epoch, seq, cut, secs, micros, Value::Array(items), kept] = a.as_slice() else {
        return None;
    };
    Some(ReadReply {
        epoch: text(epoch).filter(|e| !e.is_empty())?,
        seq: number(seq)?,
        // A score: its text may be a float's ("12" or "1.2e+16").
        cut: text(cut)?.parse::<f64>().ok().map_or(0, |f| f as u64),
        kept: number(kept)? > 0,
        time: (number(secs)?, number(micros)?),
        items: items.iter().filter_map(bytes).collect(),
    })
}

/// The page script's call.
pub(crate) fn page_call(keys: &Keys, cursor: &str, count: usize) -> Call {
    Call {
        script: PAGE,
        keys: vec![keys.hash.clone()],
        args: vec![
            cursor.to_owned(),
            count.to_string(),
            TOMBSTONE_MS.to_string(),
        ],
    }
}

/// A page of the snapshot: the next cursor and the (field, value) pairs.
pub(crate) type Page<'v> = (String, Vec<(&'v [u8], &'v [u8])>);

/// The page script's reply.
pub(crate) fn page_reply(v: &Value) -> Option<Page<'_>> {
    let Value::Array(a) = v else {
        return None;
    };
    let [cursor, Value::Array(kv)] = a.as_slice() else {
        return None;
    };
    let pairs = kv
        .chunks(2)
        .filter_map(|p| Some((bytes(p.first()?)?, bytes(p.get(1)?)?)))
        .collect();
    Some((text(cursor)?.to_owned(), pairs))
}
