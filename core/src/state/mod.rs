//! The state file of a zone (`state=FILE`): its format, pure and
//! allocation-bounded, so that the glue only reads and writes bytes.
//!
//! # Format (version 1, all integers little-endian)
//!
//! ```text
//! offset 0   magic "RLWSTATE" (8 bytes)
//!        8   format version u32 (FORMAT_VERSION)
//!       12   reserved u32 (0)
//!       16   body length u64: the bytes of the sections that follow
//!       24   sections, each: type u16 | reserved u16 (0) | length u32 | payload
//!  24 + body CRC-32C (Castagnoli) u32 of every byte before it
//! ```
//!
//! Sections (type-length-value; a reader skips the types it does not know,
//! so a newer writer may add sections without a version bump):
//!
//! | type | name      | payload                                                    |
//! |------|-----------|------------------------------------------------------------|
//! | 1    | IDENTITY  | window_ms u64, mode u8 (0 estimate, 1 strict), 3 zero bytes, zone name (u32 length + bytes), key source (u32 length + bytes) |
//! | 2    | SEED      | the zone's hash seed, 2 x u64                               |
//! | 3    | TABLE     | saved_ms u64, layout u32, strict u8, 3 zero bytes, capacity u64, newest u64, count u64, then count x (position u32, slot word u128) |
//! | 4    | OVERRIDES | count u64, then count x (fingerprint u64, action u8 (1 limit, 2 block, 3 exempt, 4 ban, 5 in_flight), 3 zero bytes, value u32 (a limit's requests, an in_flight's places, else 0), expires_ms u64) |
//!
//! IDENTITY, SEED and TABLE must each appear exactly once, OVERRIDES at
//! most once (a file written before it existed has none: no overrides); a
//! known section twice, a payload of the wrong length or with a value out
//! of range, a bad checksum, a length that does not match the file, or
//! another magic or version is refused: the caller logs it and starts with
//! an empty zone.
//!
//! # Adding a section
//!
//! 1. give it a constant in [`section`];
//! 2. add its field to [`StateFile`], write it in [`encode`] with
//!    `put_section`, and read it in `decode`'s `match` (`other` then no
//!    longer collects it);
//! 3. the glue (`src/zone/state_file.rs`) fills the field when saving and applies it
//!    after `Table::restore`.
//!
//! Older readers skip the new section, so the format version stays 1.
//!
//! An OVERRIDES action added later (5, `in_flight`) keeps the record's
//! bytes: every earlier file reads as before, and a module that predates
//! the action refuses a file holding one as malformed (logged; the zone
//! starts empty), never misreads it.
//!
//! The checksum finds accidents (a torn or truncated write, a flipped bit,
//! another file); it is not a signature. The file holds the zone's hash
//! seed: whoever can read it can compute key fingerprints and aim
//! collisions, so it is written with mode 0600 (see docs/state-file.md).

use core::fmt;

use crate::overrides::{Action, Entry, MAX_EXPIRY_MS, MAX_OVERRIDES};
use crate::rule::window::MAX_LIMIT;
use crate::shm::places::MAX_IN_FLIGHT;
use crate::table::SavedTable;

/// The file's first 8 bytes.
pub const MAGIC: [u8; 8] = *b"RLWSTATE";
/// The format version this module writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// Bytes before the first section.
const HEAD: usize = 24;
/// Bytes of one saved slot: position u32, word u128.
const SLOT_RECORD: usize = 20;
/// Fixed bytes of a TABLE payload before the slots.
const TABLE_FIXED: usize = 40;
/// Bytes of one saved override: fingerprint (or a range's id) u64, action
/// u8, 3 zero bytes, value u32 (a limit, places), expiry u64.
const OVERRIDE_RECORD: usize = 24;
/// Largest fingerprint (56 bits).
const FP_MAX: u64 = (1 << 56) - 1;

/// Whether `id` is a fingerprint or a range's id (`overrides::range`).
fn id_ok(id: u64) -> bool {
    id != 0
        && (id <= FP_MAX
            || crate::overrides::range::range_of_id(id)
                .is_some_and(|_| id <= crate::overrides::MAX_ID))
}

/// Section types.
pub mod section {
    /// The zone's name, key, window and mode.
    pub const IDENTITY: u16 = 1;
    /// The zone's hash seed.
    pub const SEED: u16 = 2;
    /// The slot table's used slots.
    pub const TABLE: u16 = 3;
    /// The zone's overrides and bans.
    pub const OVERRIDES: u16 = 4;
}

/// What a state file says about the zone that wrote it; a file whose
/// identity differs from the zone reading it is foreign.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    /// Zone name.
    pub zone: Vec<u8>,
    /// Key source text (`$binary_remote_addr`, …).
    pub key: Vec<u8>,
    /// Window length, in ms.
    pub window_ms: u64,
    /// `mode=strict`.
    pub strict: bool,
}

/// The decoded content of a state file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StateFile {
    /// The zone that wrote it.
    pub identity: Identity,
    /// The zone's hash seed.
    pub seed: [u64; 2],
    /// When the table was saved, in epoch ms.
    pub saved_ms: u64,
    /// The table's used slots.
    pub table: SavedTable,
    /// The zone's live overrides and bans (keyed by fingerprints of
    /// `seed`), in the override table's slot order.
    pub overrides: Vec<Entry>,
    /// Sections this version does not read: `(type, payload)`.
    pub other: Vec<(u16, Vec<u8>)>,
}

/// Why a state file was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StateError {
    /// Shorter than its header and checksum, or than its body length says.
    Truncated,
    /// Longer than its body length says.
    TrailingBytes,
    /// Not a state file of this module.
    BadMagic,
    /// Another format version.
    Version(u32),
    /// The checksum does not match the content.
    Checksum,
    /// A section (named) is malformed, repeated or missing.
    Section(&'static str, &'static str),
    /// Written by another zone (the message says what differs).
    Foreign(String),
}

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StateError::Truncated => f.write_str("the file is truncated"),
            StateError::TrailingBytes => f.write_str("the file has bytes after its checksum"),
            StateError::BadMagic => f.write_str("not a rate_limit_window state file"),
            StateError::Version(v) => write!(
                f,
                "format version {v}, this module reads version {FORMAT_VERSION}"
            ),
            StateError::Checksum => f.write_str("checksum mismatch (the file is corrupt)"),
            StateError::Section(name, why) => write!(f, "section {name}: {why}"),
            StateError::Foreign(why) => write!(f, "written by another zone: {why}"),
        }
    }
}

impl std::error::Error for StateError {}

/// CRC-32C (Castagnoli, reflected, polynomial 0x82F63B78) of `data`:
/// detects every burst of up to 32 flipped bits.
pub fn crc32c(data: &[u8]) -> u32 {
    const TABLE: [u32; 256] = crc_table();
    let mut crc = !0u32;
    for &b in data {
        crc = TABLE[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

const fn crc_table() -> [u32; 256] {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0x82F6_3B78 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
}

/// Appends a section of type `kind` whose payload `fill` writes.
fn put_section(out: &mut Vec<u8>, kind: u16, fill: impl FnOnce(&mut Vec<u8>)) {
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    let at = out.len();
    out.extend_from_slice(&0u32.to_le_bytes());
    fill(out);
    let len = (out.len() - at - 4) as u32;
    out[at..at + 4].copy_from_slice(&len.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

/// The bytes of a state file holding `f` (its `other` sections included).
pub fn encode(f: &StateFile) -> Vec<u8> {
    let t = &f.table;
    let mut out = Vec::with_capacity(HEAD + 256 + t.slots.len() * SLOT_RECORD);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&0u64.to_le_bytes()); // body length, below
    put_section(&mut out, section::IDENTITY, |o| {
        o.extend_from_slice(&f.identity.window_ms.to_le_bytes());
        o.extend_from_slice(&[u8::from(f.identity.strict), 0, 0, 0]);
        put_bytes(o, &f.identity.zone);
        put_bytes(o, &f.identity.key);
    });
    put_section(&mut out, section::SEED, |o| {
        o.extend_from_slice(&f.seed[0].to_le_bytes());
        o.extend_from_slice(&f.seed[1].to_le_bytes());
    });
    put_section(&mut out, section::TABLE, |o| {
        o.extend_from_slice(&f.saved_ms.to_le_bytes());
        o.extend_from_slice(&t.layout.to_le_bytes());
        o.extend_from_slice(&[u8::from(t.strict), 0, 0, 0]);
        o.extend_from_slice(&t.capacity.to_le_bytes());
        o.extend_from_slice(&t.newest.to_le_bytes());
        o.extend_from_slice(&(t.slots.len() as u64).to_le_bytes());
        for &(at, w) in &t.slots {
            o.extend_from_slice(&at.to_le_bytes());
            o.extend_from_slice(&w.to_le_bytes());
        }
    });
    put_section(&mut out, section::OVERRIDES, |o| {
        put_overrides(o, &f.overrides)
    });
    for (kind, payload) in &f.other {
        put_section(&mut out, *kind, |o| o.extend_from_slice(payload));
    }
    let body = (out.len() - HEAD) as u64;
    out[16..24].copy_from_slice(&body.to_le_bytes());
    let crc = crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The action's code in an OVERRIDES record, and its value (a limit,
/// places).
fn action_code(a: Action) -> (u8, u32) {
    match a {
        Action::Limit(n) => (1, n),
        Action::Block => (2, 0),
        Action::Exempt => (3, 0),
        Action::Ban => (4, 0),
        Action::InFlight(n) => (5, n),
    }
}

/// Writes an OVERRIDES payload.
fn put_overrides(o: &mut Vec<u8>, entries: &[Entry]) {
    o.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    for e in entries {
        let (code, limit) = action_code(e.action);
        o.extend_from_slice(&e.fp.to_le_bytes());
        o.extend_from_slice(&[code, 0, 0, 0]);
        o.extend_from_slice(&limit.to_le_bytes());
        o.extend_from_slice(&e.expires_ms.to_le_bytes());
    }
}

/// A cursor over a payload that refuses to read past its end.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn u128(&mut self) -> Option<u128> {
        Some(u128::from_le_bytes(self.take(16)?.try_into().ok()?))
    }
    /// A flag byte (0 or 1) and three zero bytes.
    fn flag(&mut self) -> Option<bool> {
        match self.take(4)? {
            [0, 0, 0, 0] => Some(false),
            [1, 0, 0, 0] => Some(true),
            _ => None,
        }
    }
    fn bytes(&mut self) -> Option<Vec<u8>> {
        let n = self.u32()? as usize;
        Some(self.take(n)?.to_vec())
    }
    fn done(&self) -> bool {
        self.0.is_empty()
    }
}

/// Checks the header, length and checksum; returns the body.
fn body(bytes: &[u8]) -> Result<&[u8], StateError> {
    if bytes.len() < 8 || bytes[..8] != MAGIC {
        return Err(if MAGIC.starts_with(&bytes[..bytes.len().min(8)]) {
            StateError::Truncated
        } else {
            StateError::BadMagic
        });
    }
    let mut r = Reader(&bytes[8..]);
    let (Some(version), Some(_), Some(body)) = (r.u32(), r.u32(), r.u64()) else {
        return Err(StateError::Truncated);
    };
    if version != FORMAT_VERSION {
        return Err(StateError::Version(version));
    }
    let need = usize::try_from(body)
        .ok()
        .and_then(|b| b.checked_add(HEAD + 4))
        .ok_or(StateError::Truncated)?;
    if bytes.len() < need {
        return Err(StateError::Truncated);
    }
    if bytes.len() > need {
        return Err(StateError::TrailingBytes);
    }
    let (content, crc) = bytes.split_at(need - 4);
    if crc32c(content) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
        return Err(StateError::Checksum);
    }
    Ok(&content[HEAD..])
}

/// Decodes a state file; refuses anything malformed without panicking.
pub fn decode(bytes: &[u8]) -> Result<StateFile, StateError> {
    let mut r = Reader(body(bytes)?);
    let mut f = StateFile::default();
    let mut seen = [false; 4];
    while !r.done() {
        let bad = StateError::Section("header", "cut short");
        let (kind, reserved, len) = (
            r.u16().ok_or(bad.clone())?,
            r.u16().ok_or(bad.clone())?,
            r.u32().ok_or(bad.clone())?,
        );
        let payload = r.take(len as usize).ok_or(bad)?;
        if reserved != 0 {
            return Err(StateError::Section("header", "reserved bits set"));
        }
        let (name, at) = match kind {
            section::IDENTITY => ("IDENTITY", 0),
            section::SEED => ("SEED", 1),
            section::TABLE => ("TABLE", 2),
            section::OVERRIDES => ("OVERRIDES", 3),
            _ => {
                f.other.push((kind, payload.to_vec()));
                continue;
            }
        };
        if std::mem::replace(&mut seen[at], true) {
            return Err(StateError::Section(name, "appears twice"));
        }
        let ok = match kind {
            section::IDENTITY => read_identity(payload, &mut f.identity),
            section::SEED => read_seed(payload, &mut f.seed),
            section::TABLE => read_table(payload, &mut f),
            _ => read_overrides(payload, &mut f.overrides),
        };
        ok.ok_or(StateError::Section(name, "malformed"))?;
    }
    for (i, name) in ["IDENTITY", "SEED", "TABLE"].into_iter().enumerate() {
        if !seen[i] {
            return Err(StateError::Section(name, "missing"));
        }
    }
    Ok(f)
}

fn read_identity(p: &[u8], id: &mut Identity) -> Option<()> {
    let mut r = Reader(p);
    id.window_ms = r.u64()?;
    id.strict = r.flag()?;
    id.zone = r.bytes()?;
    id.key = r.bytes()?;
    r.done().then_some(())
}

fn read_seed(p: &[u8], seed: &mut [u64; 2]) -> Option<()> {
    let mut r = Reader(p);
    *seed = [r.u64()?, r.u64()?];
    r.done().then_some(())
}

fn read_table(p: &[u8], f: &mut StateFile) -> Option<()> {
    let mut r = Reader(p);
    f.saved_ms = r.u64()?;
    let t = &mut f.table;
    t.layout = r.u32()?;
    t.strict = r.flag()?;
    t.capacity = r.u64()?;
    t.newest = r.u64()?;
    let count = usize::try_from(r.u64()?).ok()?;
    // The length is checked before anything is allocated for the count.
    if count.checked_mul(SLOT_RECORD)? != p.len() - TABLE_FIXED {
        return None;
    }
    t.slots = (0..count)
        .map(|_| Some((r.u32()?, r.u128()?)))
        .collect::<Option<_>>()?;
    r.done().then_some(())
}

/// Reads an OVERRIDES payload: every field in range (a fingerprint of 56
/// bits, not 0; a known action; a value only for `limit`, at most
/// [`MAX_LIMIT`], and `in_flight`, at most [`MAX_IN_FLIGHT`]; an expiry
/// within [`MAX_EXPIRY_MS`], never 0 for a ban),
/// no client twice, at most [`MAX_OVERRIDES`] entries.
fn read_overrides(p: &[u8], out: &mut Vec<Entry>) -> Option<()> {
    let mut r = Reader(p);
    let count = usize::try_from(r.u64()?).ok()?;
    // The length is checked before anything is allocated for the count.
    if count > MAX_OVERRIDES || count.checked_mul(OVERRIDE_RECORD)? != p.len() - 8 {
        return None;
    }
    let entries = (0..count)
        .map(|_| read_override(&mut r))
        .collect::<Option<Vec<_>>>()?;
    let mut fps: Vec<u64> = entries.iter().map(|e| e.fp).collect();
    fps.sort_unstable();
    if fps.windows(2).any(|w| w[0] == w[1]) {
        return None;
    }
    *out = entries;
    r.done().then_some(())
}

/// One OVERRIDES record, checked.
fn read_override(r: &mut Reader) -> Option<Entry> {
    let fp = r.u64()?;
    let code = r.take(4)?;
    let value = r.u32()?;
    let expires_ms = r.u64()?;
    let action = match (code, value) {
        ([1, 0, 0, 0], n) => Action::Limit(n),
        ([5, 0, 0, 0], n) => Action::InFlight(n),
        ([2, 0, 0, 0], 0) => Action::Block,
        ([3, 0, 0, 0], 0) => Action::Exempt,
        ([4, 0, 0, 0], 0) => Action::Ban,
        _ => return None,
    };
    let e = Entry {
        fp,
        action,
        expires_ms,
    };
    valid(&e).then_some(e)
}

/// Whether a state file may hold `e`: a fingerprint of 56 bits, not 0, or
/// a range's id; a limit at most [`MAX_LIMIT`], places at most
/// [`MAX_IN_FLIGHT`]; an end within [`MAX_EXPIRY_MS`], never none for a
/// ban.
fn valid(e: &Entry) -> bool {
    let action_ok = match e.action {
        Action::Limit(n) => n <= MAX_LIMIT,
        Action::InFlight(n) => n <= MAX_IN_FLIGHT,
        Action::Ban => e.expires_ms != 0,
        Action::Block | Action::Exempt => true,
    };
    action_ok && id_ok(e.fp) && e.expires_ms <= MAX_EXPIRY_MS
}

/// The entries of an override table's scan that a state file holds: one
/// per client, the first met (two concurrent inserts of one client may
/// both be live for an instant), and none that `decode` would refuse, so
/// that a snapshot never makes the whole file unreadable.
pub fn savable(entries: impl IntoIterator<Item = Entry>) -> Vec<Entry> {
    let mut seen = std::collections::HashSet::new();
    entries
        .into_iter()
        .filter(|e| valid(e) && seen.insert(e.fp))
        .collect()
}

/// Whether a file written by `saved` may be restored into the zone `ours`:
/// same zone name, key, window and mode; Err says what differs.
pub fn check_identity(saved: &Identity, ours: &Identity) -> Result<(), StateError> {
    let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let why = if saved.zone != ours.zone {
        format!("zone \"{}\"", s(&saved.zone))
    } else if saved.key != ours.key {
        format!(
            "key \"{}\", this zone's is \"{}\"",
            s(&saved.key),
            s(&ours.key)
        )
    } else if saved.window_ms != ours.window_ms {
        format!(
            "window {}ms, this zone's is {}ms",
            saved.window_ms, ours.window_ms
        )
    } else if saved.strict != ours.strict {
        let m = |strict| if strict { "strict" } else { "estimate" };
        format!(
            "mode={}, this zone's is mode={}",
            m(saved.strict),
            m(ours.strict)
        )
    } else {
        return Ok(());
    };
    Err(StateError::Foreign(why))
}

#[cfg(test)]
mod tests;
