//! What every gateway of a fleet must share for a zone, published in
//! Redis so that gateways that do not share say so.
//!
//! Each gateway writes, per zone, a [`Profile`] (a keyed hash of the
//! secret, never the secret; the window; the mode) with its gateway id and
//! the time, as one field of the hash [`fleet_key`], named from the zone
//! name alone: gateways whose secret or window differ still meet there.
//! [`view`] counts the gateways seen in the last minute with the same
//! profile (this one included) and those with another, and says what
//! differs.

use crate::table::hash_with_seed;

/// Profiles older than this are not counted (ms).
pub const MAX_AGE_MS: u64 = 60_000;

/// The hash of a zone's fleet: `rlw:{ZONE}:fleet`.
pub fn fleet_key(zone: &str) -> String {
    format!("rlw:{{{zone}}}:fleet")
}

/// What must match across the fleet for a zone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Profile {
    /// SipHash of the zone name and secret under a fixed key of its own
    /// (not the key-hash seed): equal secrets give equal values, and the
    /// secret cannot be read back from it.
    pub secret_hash: u64,
    /// The zone's window (ms).
    pub window_ms: u64,
    /// `estimate` or `strict`.
    pub mode: String,
}

/// What differs between two profiles.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Diff {
    /// Another `secret=`.
    pub secret: bool,
    /// Another `window=`.
    pub window: bool,
    /// Another `mode=`.
    pub mode: bool,
}

impl Diff {
    /// Bits for the zone header (secret 1, window 2, mode 4).
    pub fn bits(self) -> u64 {
        u64::from(self.secret) | u64::from(self.window) << 1 | u64::from(self.mode) << 2
    }

    /// The words of `bits`: `"secret, window"`.
    pub fn describe(bits: u64) -> String {
        let words: Vec<&str> = [(1, "secret"), (2, "window"), (4, "mode")]
            .iter()
            .filter(|(b, _)| bits & b != 0)
            .map(|&(_, w)| w)
            .collect();
        words.join(", ")
    }
}

impl Profile {
    /// The profile of zone `zone` with `secret=`, `window=` (ms) and `mode=`.
    pub fn new(zone: &[u8], secret: &[u8], window_ms: u64, mode: &str) -> Profile {
        let mut material = Vec::with_capacity(zone.len() + secret.len() + 6);
        material.extend_from_slice(b"fleet\0");
        material.extend_from_slice(zone);
        material.push(0);
        material.extend_from_slice(secret);
        const K: [u64; 2] = [0x666c_6565_745f_7072, 0x6f66_696c_655f_6b31];
        Profile {
            secret_hash: hash_with_seed(K, &material).0,
            window_ms,
            mode: mode.to_owned(),
        }
    }

    /// The field value: `v1 SECRETHASH WINDOW_MS MODE NOW_MS`.
    pub fn encode(&self, now_ms: u64) -> String {
        format!(
            "v1 {:016x} {} {} {now_ms}",
            self.secret_hash, self.window_ms, self.mode
        )
    }

    /// A field value back: the profile and when it was written.
    pub fn decode(v: &[u8]) -> Option<(Profile, u64)> {
        let t = core::str::from_utf8(v).ok()?;
        let mut w = t.split(' ');
        if w.next()? != "v1" {
            return None;
        }
        let secret_hash = u64::from_str_radix(w.next()?, 16).ok()?;
        let window_ms = w.next()?.parse().ok()?;
        let mode = w.next()?.to_owned();
        let at = w.next()?.parse().ok()?;
        Some((
            Profile {
                secret_hash,
                window_ms,
                mode,
            },
            at,
        ))
    }

    fn diff(&self, o: &Profile) -> Diff {
        Diff {
            secret: self.secret_hash != o.secret_hash,
            window: self.window_ms != o.window_ms,
            mode: self.mode != o.mode,
        }
    }
}

/// The fleet as one gateway sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct View {
    /// Gateways seen in the last minute with this profile, this one included.
    pub peers: u64,
    /// Gateways seen in the last minute under the zone's name with another.
    pub mismatched: u64,
    /// What differs, over every mismatched gateway ([`Diff::bits`]).
    pub diff: u64,
}

/// Reads the fleet hash (`(field, value)` pairs): `me` is this gateway's
/// field, `mine` its profile. Fields older than [`MAX_AGE_MS`] or not
/// readable are skipped; this gateway always counts as a peer.
pub fn view<'f>(
    fields: impl IntoIterator<Item = (&'f [u8], &'f [u8])>,
    me: &str,
    mine: &Profile,
    now_ms: u64,
) -> View {
    let mut v = View {
        peers: 1,
        ..View::default()
    };
    for (f, val) in fields {
        if f == me.as_bytes() {
            continue;
        }
        let Some((p, at)) = Profile::decode(val) else {
            continue;
        };
        if now_ms.saturating_sub(at) > MAX_AGE_MS {
            continue;
        }
        let d = mine.diff(&p);
        if d == Diff::default() {
            v.peers += 1;
        } else {
            v.mismatched += 1;
            v.diff |= d.bits();
        }
    }
    v
}

/// Fields of the fleet hash so old (10 minutes) that a gateway removes
/// them (`HDEL`, idempotent) when it reads the hash.
pub fn stale<'f>(
    fields: impl IntoIterator<Item = (&'f [u8], &'f [u8])>,
    now_ms: u64,
) -> Vec<&'f [u8]> {
    fields
        .into_iter()
        .filter(|(_, v)| {
            Profile::decode(v).is_some_and(|(_, at)| now_ms.saturating_sub(at) > 10 * MAX_AGE_MS)
        })
        .map(|(f, _)| f)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_profile_never_holds_the_secret_and_round_trips() {
        let p = Profile::new(b"api", b"correct-horse-battery", 60_000, "estimate");
        let text = p.encode(1_700_000_000_000);
        assert!(!text.contains("correct-horse"), "{text}");
        assert_eq!(
            Profile::decode(text.as_bytes()),
            Some((p.clone(), 1_700_000_000_000))
        );
        assert_ne!(
            p,
            Profile::new(b"api", b"correct-horse-batterx", 60_000, "estimate")
        );
        assert_ne!(
            p.secret_hash,
            Profile::new(b"apj", b"correct-horse-battery", 60_000, "estimate").secret_hash
        );
        assert_eq!(Profile::decode(b"v2 0 0 x 0"), None);
    }

    #[test]
    fn peers_and_mismatches_are_counted_with_what_differs() {
        let now = 1_000_000;
        let me = "000000000000000a";
        let mine = Profile::new(b"z", b"secret-secret-16", 60_000, "estimate");
        let twin = mine.encode(now - 1_000);
        let other_secret = Profile::new(b"z", b"another-secret-1", 60_000, "estimate").encode(now);
        let other_window = Profile::new(b"z", b"secret-secret-16", 1_000, "estimate").encode(now);
        let old = mine.encode(now - MAX_AGE_MS - 1);
        let fields = [
            (me.as_bytes(), mine.encode(now)),
            (b"b".as_slice(), twin),
            (b"c".as_slice(), other_secret),
            (b"d".as_slice(), other_window),
            (b"e".as_slice(), old),
            (b"f".as_slice(), "junk".to_owned()),
        ];
        let v = view(
            fields.iter().map(|(f, v)| (*f, v.as_bytes())),
            me,
            &mine,
            now,
        );
        assert_eq!(
            v,
            View {
                peers: 2,
                mismatched: 2,
                diff: 3
            }
        );
        assert_eq!(Diff::describe(v.diff), "secret, window");
        assert_eq!(Diff::describe(4), "mode");
        let alone = view(std::iter::empty(), me, &mine, now);
        assert_eq!(
            alone,
            View {
                peers: 1,
                mismatched: 0,
                diff: 0
            }
        );
        let ancient = mine.encode(now - 11 * MAX_AGE_MS);
        let f = [
            (b"x".as_slice(), ancient.as_bytes()),
            (b"b".as_slice(), fields[1].1.as_bytes()),
        ];
        assert_eq!(stale(f, now), vec![b"x".as_slice()]);
    }
}
