//! Overrides of a `redis=` zone shared by the fleet: the Redis keys that
//! hold them, the text of their values, their MAC and the scripts that
//! write and read them (pure; the sync thread's glue is
//! `src/sync/fleet_overrides.rs`, the order and its decisions
//! [`super::order`]).
//!
//! Per zone, all in one Redis Cluster slot (the `{ZONE}` hash tag):
//!
//! - `rlw:{ZONE}:ovr3:seq`: the fleet's sequence. Every change gets the
//!   next number from the script that writes it (one more, and at least
//!   Redis's `TIME` in ms × 1024): the **one order** of the fleet, never a
//!   gateway's clock.
//! - `rlw:{ZONE}:ovr3:log`: a sorted set, score the sequence, member
//!   `SEQ FIELD BODY`: the changes in order, trimmed to [`LOG_MAX`] (the
//!   last sequence trimmed in `rlw:{ZONE}:ovr3:log:cut`); each gateway
//!   reads what follows the last change it saw.
//! - `rlw:{ZONE}:ovr3`: the snapshot hash, field → `v3 SEQ EPOCH BODY`,
//!   each client's and range's last state (a removal stays
//!   [`TOMBSTONE_MS`]), for a gateway that starts or fell behind the log
//!   (read in pages, `HSCAN`).
//! - `rlw:{ZONE}:ovr3:epoch`: a random word set once by the first script
//!   that finds it missing: a new one says Redis lost the keys.
//! - `rlw:{ZONE}:ovr3:w:GATEWAY.CHANGE`: the sequence a change got, kept
//!   [`DEDUPE_MS`]: a write sent again (its reply timed out) gets the same
//!   answer and is not applied twice.
//!
//! A field is a client's fingerprint (14 hex digits) or `r` and a range's
//! id; a BODY is `ORIGIN STATE MAC`: ORIGIN the gateway id and its change
//! number (`GGGGGGGGGGGGGGGG.C`, hex; change 0: a state written back), STATE
//! `ACTION VALUE EXPIRES_MS` (expiry in Redis's time, UTC epoch ms, 0:
//! none) or `del`, MAC the first 16 bytes (hex) of HMAC-SHA256 keyed by the
//! zone's `secret=` over the zone, the field, the origin and the state: a
//! value without the right MAC (another fleet's, malformed, hostile) is
//! never applied ([`Ignored`]).

use hmac::{Hmac, Mac};
use sha1::{Digest, Sha1};
use sha2::Sha256;

use super::range::RANGE_BIT;
use super::{Action, Entry};

/// Most changes the log keeps.
pub const LOG_MAX: u64 = 100_000;
/// How long a removal stays in the snapshot (ms, by Redis's `TIME`): a
/// gateway writing its state back within that never brings back what
/// was removed.
pub const TOMBSTONE_MS: u64 = 600_000;
/// How long a change's sequence is kept for a write sent again (ms).
pub const DEDUPE_MS: u64 = 600_000;
/// Lifetime of the keys after the last write (ms): 30 days (a gateway that
/// finds them gone writes its state back).
pub const KEY_TTL_MS: u64 = 30 * 86_400_000;

/// The Redis keys of a zone's overrides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keys {
    /// The snapshot hash.
    pub hash: String,
    /// The sequence.
    pub seq: String,
    /// The log (a sorted set by sequence).
    pub log: String,
    /// The epoch word.
    pub epoch: String,
    zone: String,
}

impl Keys {
    /// The keys of zone `zone`.
    pub fn new(zone: &str) -> Keys {
        let base = format!("rlw:{{{zone}}}:ovr3");
        Keys {
            seq: format!("{base}:seq"),
            log: format!("{base}:log"),
            epoch: format!("{base}:epoch"),
            hash: base,
            zone: zone.to_owned(),
        }
    }

    /// The key that keeps the sequence of change `o`.
    pub fn dedupe(&self, o: Origin) -> String {
        format!("rlw:{{{}}}:ovr3:w:{}", self.zone, o.text())
    }
}

/// Who made a change: a gateway and its change number (its local
/// version; 0 for a state written back when healing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Origin {
    /// The gateway's id (the zone's, see the fleet's counts).
    pub gateway: u64,
    /// Its local version ([`super::order::LOCAL`] set), or 0.
    pub change: u64,
}

impl Origin {
    fn text(self) -> String {
        format!("{:016x}.{:x}", self.gateway, self.change)
    }

    fn parse(t: &str) -> Option<Origin> {
        let (g, c) = t.split_once('.')?;
        if g.len() != 16 || c.is_empty() || c.len() > 16 {
            return None;
        }
        Some(Origin {
            gateway: u64::from_str_radix(g, 16).ok()?,
            change: u64::from_str_radix(c, 16).ok()?,
        })
    }
}

/// The MAC key of a zone: its name and `secret=`.
#[derive(Clone)]
pub struct MacKey {
    mac: Hmac<Sha256>,
    zone: Vec<u8>,
}

impl core::fmt::Debug for MacKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("MacKey(***)")
    }
}

impl MacKey {
    /// The key of zone `zone` with `secret=` `secret`.
    pub fn new(zone: &[u8], secret: &[u8]) -> MacKey {
        MacKey {
            mac: Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes keys of any length"),
            zone: zone.to_vec(),
        }
    }

    /// The MAC (32 hex digits) of `field` and `signed` (origin and state).
    fn tag(&self, field: &str, signed: &str) -> String {
        let mut m = self.mac.clone();
        for part in [b"rlw-ovr3".as_slice(), &self.zone, field.as_bytes()] {
            m.update(part);
            m.update(b"\0");
        }
        m.update(signed.as_bytes());
        let out = m.finalize().into_bytes();
        out[..16].iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// The field of an id (a fingerprint, or a range's id).
pub fn field(id: u64) -> String {
    let fp = id & (RANGE_BIT - 1);
    if id & RANGE_BIT != 0 {
        format!("r{fp:014x}")
    } else {
        format!("{fp:014x}")
    }
}

/// The id a field names (None: not one of ours). A range's id may be 0
/// below the range bit (`0.0.0.0/0`).
pub fn parse_field(f: &[u8]) -> Option<u64> {
    let (range, hex) = match f.strip_prefix(b"r") {
        Some(h) => (RANGE_BIT, h),
        None => (0, f),
    };
    if hex.len() != 14 || !hex.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    let fp = u64::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
    (fp != 0 || range != 0).then_some(fp | range)
}

/// The text of a state: `ACTION VALUE EXPIRES_MS`, or `del`.
pub fn state_text(e: Option<&Entry>) -> String {
    match e {
        None => "del".into(),
        Some(e) => {
            let value = match e.action {
                Action::Limit(n) | Action::InFlight(n) => n,
                _ => 0,
            };
            format!("{} {value} {}", e.action.name(), e.expires_ms)
        }
    }
}

/// The body of a change of `id` to `e` (None: removed; its expiry in
/// Redis's time) by `origin`: `ORIGIN STATE MAC`.
pub fn body(key: &MacKey, id: u64, e: Option<&Entry>, origin: Origin) -> String {
    let signed = format!("{} {}", origin.text(), state_text(e));
    let mac = key.tag(&field(id), &signed);
    format!("{signed} {mac}")
}

/// One change or state read from Redis, its MAC checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Read {
    /// The id (a fingerprint, or a range's id).
    pub id: u64,
    /// Its override (None: removed); the expiry in Redis's time.
    pub entry: Option<Entry>,
    /// Its place in the fleet's order.
    pub seq: u64,
    /// Who made it.
    pub origin: Origin,
}

/// Why a value read is not applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ignored {
    /// Not a value of this format.
    Malformed,
    /// Another `secret=`'s (another fleet), or changed by someone without it.
    Mac,
}

/// Reads a field and value of the snapshot hash: `v3 SEQ EPOCH BODY`.
pub fn parse_value(key: &MacKey, field: &[u8], value: &[u8]) -> Result<Read, Ignored> {
    let v = std::str::from_utf8(value).map_err(|_| Ignored::Malformed)?;
    let mut w = v.splitn(4, ' ');
    let (Some("v3"), Some(seq), Some(_epoch), Some(rest)) =
        (w.next(), w.next(), w.next(), w.next())
    else {
        return Err(Ignored::Malformed);
    };
    read_body(key, field, seq, rest)
}

/// Reads a member of the log: `SEQ FIELD BODY`.
pub fn parse_log(key: &MacKey, member: &[u8]) -> Result<Read, Ignored> {
    let m = std::str::from_utf8(member).map_err(|_| Ignored::Malformed)?;
    let mut w = m.splitn(3, ' ');
    let (Some(seq), Some(field), Some(rest)) = (w.next(), w.next(), w.next()) else {
        return Err(Ignored::Malformed);
    };
    read_body(key, field.as_bytes(), seq, rest)
}

/// The sequence written as text by the scripts (decimal, at least 1).
fn seq_of(t: &str) -> Option<u64> {
    (!t.is_empty() && t.len() <= 19 && t.bytes().all(|b| b.is_ascii_digit()))
        .then(|| t.parse().ok())
        .flatten()
        .filter(|&s| s > 0)
}

fn read_body(key: &MacKey, field: &[u8], seq: &str, body: &str) -> Result<Read, Ignored> {
    let bad = Ignored::Malformed;
    let id = parse_field(field).ok_or(bad)?;
    let seq = seq_of(seq).ok_or(bad)?;
    let (signed, mac) = body.rsplit_once(' ').ok_or(bad)?;
    let (origin, state) = signed.split_once(' ').ok_or(bad)?;
    let origin = Origin::parse(origin).ok_or(bad)?;
    let entry = parse_state(id, state).ok_or(bad)?;
    if mac.len() != 32 || key.tag(&self::field(id), signed) != mac {
        return Err(Ignored::Mac);
    }
    Ok(Read {
        id,
        entry,
        seq,
        origin,
    })
}

/// A state's text back (`Some(None)`: `del`); None when it is not ours.
fn parse_state(id: u64, state: &str) -> Option<Option<Entry>> {
    let w: Vec<&str> = state.split(' ').collect();
    let num = |s: &str| {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<u64>().ok())
            .flatten()
    };
    let [action, value, exp] = w.as_slice() else {
        return (w.as_slice() == ["del"]).then_some(None);
    };
    let small = |s: &str, max: u32| u32::try_from(num(s)?).ok().map(|n| n.min(max));
    let action = match *action {
        "limit" => Action::Limit(small(value, crate::MAX_LIMIT)?),
        "in_flight" => Action::InFlight(small(value, crate::shm::places::MAX_IN_FLIGHT)?),
        "block" => Action::Block,
        "exempt" => Action::Exempt,
        "ban" => Action::Ban,
        _ => return None,
    };
    Some(Some(Entry {
        fp: id,
        action,
        expires_ms: num(exp)?.min(super::MAX_EXPIRY_MS),
    }))
}

/// A Redis script and its SHA1 name (for `EVALSHA`).
#[derive(Clone, Copy, Debug)]
pub struct Script {
    /// The Lua text.
    pub text: &'static str,
}

impl Script {
    /// The SHA1 of the text, hex (Redis's name for the script).
    pub fn sha(&self) -> String {
        Sha1::digest(self.text.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// The next sequence (a local function of the two writes): one more than
/// the last, and at least Redis's `TIME` in ms × 1024, so that after a
/// restart from an older copy or a failover to a replica that lagged,
/// new changes still come after every one made before (like a stream's
/// ids; below 2^53, exact in Lua and in a sorted set's score).
macro_rules! next_seq {
    () => {
        "local function next_seq() \
local t = redis.call('TIME') \
local cur = tonumber(redis.call('GET', KEYS[2]) or '0') or 0 \
local s = math.max(cur + 1, (tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)) * 1024) \
redis.call('SET', KEYS[2], string.format('%d', s)) \
return s end "
    };
}

/// The common tail of the two writes: the hash, the log (trimmed) and the
/// keys' lifetime. Locals: `s` the new sequence, `e` the value's epoch
/// word.
macro_rules! write_tail {
    () => {
        "local t = string.format('%d', s) \
redis.call('HSET', KEYS[1], ARGV[1], 'v3 ' .. t .. ' ' .. e .. ' ' .. ARGV[2]) \
redis.call('ZADD', KEYS[3], s, t .. ' ' .. ARGV[1] .. ' ' .. ARGV[2]) \
local n = redis.call('ZCARD', KEYS[3]) \
local max = tonumber(ARGV[4]) \
if n > max then \
local last = redis.call('ZRANGE', KEYS[3], n - max - 1, n - max - 1, 'WITHSCORES') \
redis.call('SET', KEYS[3] .. ':cut', last[2]) \
redis.call('ZREMRANGEBYRANK', KEYS[3], 0, n - max - 1) end \
for i = 1, 4 do redis.call('PEXPIRE', KEYS[i], ARGV[5]) end \
redis.call('PEXPIRE', KEYS[3] .. ':cut', ARGV[5]) \
return s"
    };
}

/// A change made on a gateway. KEYS: hash, seq, log, epoch, the
/// change's dedupe key; ARGV: field, body, `1` for a removal, [`LOG_MAX`],
/// [`KEY_TTL_MS`], a new epoch word, [`DEDUPE_MS`]. Returns the change's
/// sequence (the same one when it ran before), or minus the sequence of
/// the operator's state that refused it: a ban is never written over a
/// live operator's state (block, exempt, limit, in_flight; its expiry by
/// Redis's `TIME`), whichever gateway's change reached Redis first.
pub const WRITE: Script = Script {
    text: concat!(
        next_seq!(),
        "local prev = redis.call('GET', KEYS[5]) \
if prev then return tonumber(prev) end \
if string.match(ARGV[2], '^%S+ ban ') then \
local v = redis.call('HGET', KEYS[1], ARGV[1]) \
local fs, act, exp = string.match(v or '', '^v3 (%d+) %S+ %S+ (%a[%a_]*) %d+ (%d+) ') \
if fs and act ~= 'ban' then \
local t = redis.call('TIME') \
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) \
if tonumber(exp) == 0 or tonumber(exp) > now then return -tonumber(fs) end end end \
redis.call('SET', KEYS[4], ARGV[6], 'NX') \
local s = next_seq() \
redis.call('SET', KEYS[5], string.format('%d', s), 'PX', ARGV[7]) \
local e = redis.call('GET', KEYS[4]) or '-' ",
        write_tail!()
    ),
};

/// A state written back by a gateway that found Redis lost it. KEYS:
/// hash, seq, log, epoch; ARGV: field, body, `1` for a removal,
/// [`LOG_MAX`], [`KEY_TTL_MS`], the epoch it was known in, its sequence
/// there. The state is written only where the field is absent, holds an
/// older state of the same epoch (a state written back counts as its
/// state in the epoch it came from: its value's epoch word is
/// `EPOCH/SEQ`), or a value not of this format: never over a change made
/// since (whose sequence, drawn from Redis's `TIME`, is larger), and never
/// over the very value the gateway read (its sequence is the value's: a
/// state written back and read by another gateway, written back again,
/// would get a new sequence and replace a later change that Redis lost
/// after another gateway had it acknowledged). Returns its sequence, or
/// 0 when nothing was written.
pub const HEAL: Script = Script {
    text: concat!(
        next_seq!(),
        "local v = redis.call('HGET', KEYS[1], ARGV[1]) \
if v then \
local fs, fe = string.match(v, '^v3 (%d+) (%S+) ') \
if fs then \
local at = tonumber(fs) \
local he, hk = string.match(fe, '^(.-)/(%d+)$') \
if he then fe = he fs = hk end \
if fe ~= ARGV[6] or tonumber(fs) >= tonumber(ARGV[7]) or at == tonumber(ARGV[7]) then return 0 end end \
elseif ARGV[3] == '1' then return 0 end \
local s = next_seq() \
local e = ARGV[6] .. '/' .. ARGV[7] ",
        write_tail!()
    ),
};

/// One read of the order. KEYS: epoch, seq, log; ARGV: a new epoch word
/// (set if none, where Redis takes writes: a read-only replica still
/// answers), the last sequence seen, how many changes at most (0:
/// none). Returns `{epoch, seq, the last sequence trimmed from the log
/// (0: none), TIME
/// seconds, TIME microseconds, {members after the one seen and up to the
/// sequence (one numbered above it is not the fleet's), in order}, 1 if
/// the change numbered as the last one seen is still in the log}`.
pub const READ: Script = Script {
    text: "pcall(redis.call, 'SET', KEYS[1], ARGV[1], 'NX') \
local e = redis.call('GET', KEYS[1]) or '' \
local s = redis.call('GET', KEYS[2]) or '0' \
local cut = redis.call('GET', KEYS[3] .. ':cut') or '0' \
local at = #redis.call('ZRANGEBYSCORE', KEYS[3], ARGV[2], ARGV[2], 'LIMIT', 0, 1) \
local items = {} \
if tonumber(ARGV[3]) > 0 then \
items = redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. ARGV[2], s, 'LIMIT', 0, ARGV[3]) end \
local t = redis.call('TIME') \
return {e, s, cut, t[1], t[2], items, at}",
};

/// One page of the snapshot hash. KEYS: hash; ARGV: `HSCAN`'s cursor and
/// count, [`TOMBSTONE_MS`]. Deletes the entries ended by Redis's `TIME`,
/// and the removals older than [`TOMBSTONE_MS`] (by the time in their
/// sequence), it meets. Returns
/// `{next cursor, {field, value, ...}}`.
pub const PAGE: Script = Script {
    text: "local t = redis.call('TIME') \
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) \
local r = redis.call('HSCAN', KEYS[1], ARGV[1], 'COUNT', ARGV[2]) \
local out = {} \
local kv = r[2] \
for i = 1, #kv, 2 do \
local exp = tonumber(string.match(kv[i + 1], ' (%d+) %x+$') or '') \
local gone = string.match(kv[i + 1], ' del %x+$') and \
(tonumber(string.match(kv[i + 1], '^v3 (%d+) ') or '') or 0) < (now - tonumber(ARGV[3])) * 1024 \
if gone or (exp and exp > 0 and exp <= now) then redis.call('HDEL', KEYS[1], kv[i]) \
else out[#out + 1] = kv[i] out[#out + 1] = kv[i + 1] end end \
return {r[1], out}",
};

#[cfg(test)]
#[path = "remote_tests.rs"]
mod tests;
