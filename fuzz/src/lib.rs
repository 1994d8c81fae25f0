//! The checks behind every fuzz target, one function per target, each taking
//! the raw fuzz input and panicking on a finding.
//!
//! This file is also compiled into `core/tests/all/fuzz_regressions.rs` (with
//! `#[path]`), which replays every file under `fuzz/regressions/<target>/`
//! through [`TARGETS`], so saved crash inputs stay tested under plain
//! `cargo test` without libFuzzer or a nightly compiler. It may therefore
//! use nothing but `std` and `rate_limit_window_core`.

use rate_limit_window_core::conf::parse::{
    parse_limit as p_limit, parse_limit_params, parse_size as p_size, parse_time_ms, parse_window,
    parse_zone_params, LimitSpec,
};
use rate_limit_window_core::testing::reference::Model;
use rate_limit_window_core::testing::Region;
use rate_limit_window_core::{
    hash_with_seed, Admission, Counter, FailPolicy, Outcome, Table, Window, MAX_LIMIT, PROBE,
    SLOT_BYTES,
};

/// A fuzz check: panics on a finding.
pub type Check = fn(&[u8]);

/// Every target by name, as `fuzz/fuzz_targets/<name>.rs` and
/// `fuzz/regressions/<name>/` call it.
pub const TARGETS: &[(&str, Check)] = &[
    ("parse_size", parse_size),
    ("parse_time", parse_time),
    ("parse_limit", parse_limit),
    ("zone_params", zone_params),
    ("limit_params", limit_params),
    ("table_model", table_model),
    ("table_tiny", table_tiny),
    ("state_file", state_file),
    ("override_body", override_body),
];

/// The smallest zone size the fuzzed glue would pass (8 pages of 4 KiB).
const MIN_ZONE: usize = 8 * 4096;

/// A little-endian u64 from up to 8 leading bytes of `data`.
fn le(data: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = data.len().min(8);
    b[..n].copy_from_slice(&data[..n]);
    u64::from_le_bytes(b)
}

/// Error messages quote configuration bytes escaped: never a control
/// character (a log line cannot be broken or forged), and bounded length
/// (the longest is an unknown zone parameter: 64 quoted bytes and the list
/// of the 16 known ones, about 520 bytes).
fn check_message(msg: &str) {
    assert!(
        !msg.chars().any(char::is_control),
        "unescaped message {msg:?}"
    );
    assert!(msg.len() <= 768, "unbounded message ({} bytes)", msg.len());
}

/// `parse_size`: never panics; accepts only `DIGITS[kKmM]`; the value fits
/// `isize`; decimal renderings of values round-trip.
pub fn parse_size(data: &[u8]) {
    if let Some(v) = p_size(data) {
        assert!(v <= isize::MAX as usize);
        let (digits, scale) = match data.last() {
            Some(b'k' | b'K') => (&data[..data.len() - 1], 1024),
            Some(b'm' | b'M') => (&data[..data.len() - 1], 1 << 20),
            _ => (data, 1),
        };
        assert!(!digits.is_empty() && digits.iter().all(u8::is_ascii_digit));
        let n = digits
            .iter()
            .fold(0u128, |n, d| n * 10 + u128::from(d - b'0'));
        assert_eq!(n * scale, v as u128);
        assert_eq!(p_size(v.to_string().as_bytes()), Some(v));
    }
    // Round trips of an arbitrary value, bare and with each suffix.
    let x = le(data) as usize;
    let bare = p_size(x.to_string().as_bytes());
    assert_eq!(bare, (x <= isize::MAX as usize).then_some(x));
    for (suffix, scale) in [("k", 1usize << 10), ("M", 1 << 20)] {
        let got = p_size(format!("{x}{suffix}").as_bytes());
        let want = (x <= isize::MAX as usize / scale).then(|| x * scale);
        assert_eq!(got, want, "{x}{suffix}");
    }
}

/// `Xw Yd Zh Am Bs Cms` rendering of `ms`, zero parts left out.
fn render_time(ms: u64, bare_seconds: bool) -> String {
    let parts = [
        (604_800_000, "w"),
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1_000, "s"),
        (1, "ms"),
    ];
    let mut out = String::new();
    let mut rest = ms;
    for (unit, name) in parts {
        let n = rest / unit;
        rest %= unit;
        if n > 0 {
            out.push_str(&n.to_string());
            if !(bare_seconds && name == "s" && rest == 0) {
                out.push_str(name);
            }
        }
    }
    if out.is_empty() {
        out.push_str("0ms");
    }
    out
}

/// `parse_time_ms`: never panics; accepted values fit `i64`, use only
/// `0-9 w d h m s` and spaces and contain a digit; canonical renderings
/// round-trip; the window wrapper agrees with it.
pub fn parse_time(data: &[u8]) {
    let r = parse_time_ms(data);
    if let Some(v) = r {
        assert!(v <= i64::MAX as u64);
        assert!(data.iter().any(u8::is_ascii_digit));
        assert!(data.iter().all(|c| b"0123456789wdhms ".contains(c)));
        assert_eq!(parse_time_ms(render_time(v, false).as_bytes()), Some(v));
    }
    match parse_window(data) {
        Ok(w) => assert_eq!(Some(w.ms()), r),
        Err(e) => {
            let e = e.to_string();
            check_message(&e);
            assert!(e.starts_with("invalid window \""));
            if let Some(v) = r {
                assert!(Window::from_ms(v).is_err());
            }
        }
    }
    let x = le(data) & (i64::MAX as u64);
    assert_eq!(parse_time_ms(render_time(x, false).as_bytes()), Some(x));
    assert_eq!(parse_time_ms(render_time(x, true).as_bytes()), Some(x));
    let secs = x / 1000;
    assert_eq!(
        parse_time_ms(secs.to_string().as_bytes()),
        Some(secs * 1000)
    );
}

/// `parse_limit`: never panics; accepts exactly 1..=10 digits of value at
/// most MAX_LIMIT; the error quotes a prefix of the input, escaped.
pub fn parse_limit(data: &[u8]) {
    let digits = !data.is_empty() && data.len() <= 10 && data.iter().all(u8::is_ascii_digit);
    match p_limit(data) {
        Ok(n) => {
            assert!(digits && n <= MAX_LIMIT);
            let v = data.iter().fold(0u64, |v, d| v * 10 + u64::from(d - b'0'));
            assert_eq!(u64::from(n), v);
            assert_eq!(p_limit(n.to_string().as_bytes()), Ok(n));
        }
        Err(e) => {
            assert!(data.starts_with(e.input()));
            assert_eq!(e.truncated(), data.len() > e.input().len());
            let msg = e.to_string();
            check_message(&msg);
            assert!(msg.starts_with("invalid limit \""));
            if digits {
                let v = data.iter().fold(0u64, |v, d| v * 10 + u64::from(d - b'0'));
                assert!(v > u64::from(MAX_LIMIT));
            }
        }
    }
    let x = (le(data) % (u64::from(MAX_LIMIT) + 2)) as u32;
    assert_eq!(
        p_limit(x.to_string().as_bytes()).ok(),
        (x <= MAX_LIMIT).then_some(x)
    );
}

fn words(data: &[u8]) -> Vec<&[u8]> {
    data.split(|&c| c == b' ').collect()
}

/// `parse_zone_params` on the input split at spaces: never panics; what it
/// accepts is consistent with its parts; messages are escaped.
pub fn zone_params(data: &[u8]) {
    let args = words(data);
    match parse_zone_params(&args, MIN_ZONE) {
        Ok(p) => {
            assert!(!p.name.is_empty() && p.size >= MIN_ZONE);
            let zone = args
                .iter()
                .rev()
                .find_map(|a| a.strip_prefix(b"zone="))
                .expect("accepted without zone=");
            assert!(zone.starts_with(&p.name) && zone[p.name.len()] == b':');
            assert_eq!(p_size(&zone[p.name.len() + 1..]), Some(p.size));
            if let Some(r) = &p.redis {
                assert!(
                    (r.url.starts_with("redis://") && r.url.ends_with('/'))
                        || r.url.starts_with("redis+unix:///")
                );
                assert!(r.url.bytes().all(|c| c.is_ascii_graphic()));
                assert!((10..=60_000).contains(&r.sync_ms));
            } else {
                assert!(!args
                    .iter()
                    .any(|a| a.starts_with(b"sync=") || a.starts_with(b"secret=")));
            }
            let _ = p.window.ms();
            assert!(matches!(p.fail, FailPolicy::Open | FailPolicy::Closed));
        }
        Err(e) => check_message(&e.to_string()),
    }
}

/// `parse_limit_params` on the input split at spaces: never panics; a fixed
/// limit agrees with `parse_limit`, a variable one starts with `$`.
pub fn limit_params(data: &[u8]) {
    let args = words(data);
    match parse_limit_params(&args) {
        Ok(p) => {
            assert!(!p.zone.is_empty());
            let raw = args
                .iter()
                .rev()
                .find_map(|a| a.strip_prefix(b"limit="))
                .expect("accepted without limit=");
            match p.limit {
                LimitSpec::Fixed(n) => assert_eq!(p_limit(raw), Ok(n)),
                LimitSpec::Variable(v) => assert!(v == raw && v[0] == b'$'),
            }
        }
        Err(e) => check_message(&e.to_string()),
    }
}

/// Epoch ms the table fuzz starts at (2026-01-01T00:00:00Z).
const T0: u64 = 1_767_225_600_000;

/// Reads the input as a stream of bytes, zeros past its end.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u64 {
        u64::from(self.u8()) | u64::from(self.u8()) << 8
    }
    fn u32(&mut self) -> u64 {
        self.u16() | self.u16() << 16
    }
    fn done(&self) -> bool {
        self.0.is_empty()
    }
}

/// A window length from one byte: mostly 1 s or 1 min, else 1..=200 s.
fn window_from(b: &mut Bytes) -> Window {
    let ms = match b.u8() % 4 {
        0 => 1_000,
        1 => 60_000,
        2 => 1_000 + b.u32() % 199_001,
        _ => 1_000 + b.u32() % 86_399_001,
    };
    Window::from_ms(ms).expect("in range")
}

/// The next clock step, in ms: mostly small steps forward, sometimes a
/// window or two, rarely backwards or a long jump.
fn step(tag: u8, b: &mut Bytes) -> i64 {
    match tag % 16 {
        0..=8 => (b.u16() % 2_000) as i64,
        9..=11 => (b.u32() % 130_000) as i64,
        12 => -((b.u32() % 130_000) as i64),
        13 => (b.u32() % 200_000_000) as i64,
        _ => 0,
    }
}

/// A limit from one byte: mostly 0..12, sometimes large.
fn limit_from(x: u8) -> u32 {
    match x {
        0..=239 => u32::from(x % 12),
        240..=247 => 1_000,
        _ => MAX_LIMIT,
    }
}

/// The table against the reference model: keys placed in disjoint
/// candidate groups of a table far larger than needed (so nothing is ever
/// evicted), then a byte-driven sequence of acquires (clock mostly forward,
/// sometimes backwards) and undos. Every decision and every key's counts
/// must match the model exactly.
pub fn table_model(data: &[u8]) {
    const KEYS: usize = 12;
    let mut b = Bytes(data);
    let w = window_from(&mut b);
    let seed = [b.u32(), b.u32()];
    let mut buf = Region::new(Table::HEADER_BYTES + 4096 * SLOT_BYTES);
    let len = buf.len();
    // SAFETY: an exclusive, 64-byte aligned buffer that outlives the table.
    let table = unsafe { Table::init(buf.ptr(), len, w, seed) }.expect("init");
    // Keys with pairwise disjoint candidate groups (see core/tests/all/model.rs:
    // the model knows nothing of placement).
    let mut keys: Vec<Vec<u8>> = vec![];
    let mut taken = std::collections::HashSet::new();
    for salt in 0u32.. {
        if keys.len() == KEYS {
            break;
        }
        let k = salt.to_le_bytes().to_vec();
        let g = table.candidate_groups(table.hash_key(&k));
        if !taken.contains(&g[0]) && !taken.contains(&g[1]) {
            taken.extend(g);
            keys.push(k);
        }
    }
    let mut model = Model::new(w);
    let mut now = T0;
    let mut admissions: Vec<(usize, Admission)> = vec![];
    let mut backwards = 0u64;
    let mut ops = 0;
    while !b.done() && ops < 4096 {
        ops += 1;
        let tag = b.u8();
        if tag % 16 == 15 {
            let nth = usize::from(b.u8());
            if !admissions.is_empty() {
                let (key, a) = admissions.remove(nth % admissions.len());
                table.undo(&a);
                model.undo(key as u64, a.window_index());
            }
        } else {
            now = now.saturating_add_signed(step(tag, &mut b));
            let key = usize::from(b.u8()) % KEYS;
            let limit = limit_from(b.u8());
            let h = hash_with_seed(seed, &keys[key]);
            let d = table.acquire(h, now, limit, FailPolicy::Closed, key);
            let m = model.acquire(key as u64, now, limit);
            let ctx = format!("key {key} now {now} limit {limit} window {} ms", w.ms());
            assert_eq!(d.outcome == Outcome::Admitted, m.admitted, "outcome: {ctx}");
            assert_eq!(d.remaining, m.remaining, "remaining: {ctx}");
            assert_eq!(d.retry_after_s, m.retry_after_s, "retry_after_s: {ctx}");
            assert_eq!(d.reset_s, m.reset_s, "reset_s: {ctx}");
            assert_eq!(d.estimate, m.estimate, "estimate: {ctx}");
            assert_eq!(
                d.events.clock_backwards, m.clock_backwards,
                "backwards: {ctx}"
            );
            assert!(!d.events.evicted_live, "evicted a live key: {ctx}");
            assert_eq!(d.admission.map(|a| a.window_index()), m.counted_in, "{ctx}");
            backwards += u64::from(m.clock_backwards);
            if let Some(a) = d.admission {
                admissions.push((key, a));
            }
        }
        for (k, key) in keys.iter().enumerate() {
            let s = table.peek(hash_with_seed(seed, key), now);
            let (c, e, idx, _) = model.view(k as u64, now);
            assert_eq!(
                (s.current, s.previous, s.window_index),
                (c.current, c.previous, idx),
                "peek key {k} now {now}"
            );
            assert_eq!(s.estimate, rate_limit_window_core::estimate(c, e, w.ms()));
        }
    }
    assert_eq!(table.counter(Counter::ClockBackwards), backwards);
    assert_eq!(table.counter(Counter::FailClosed), 0);
}

/// A table of two groups and up to 64 keys, so keys collide, evict each
/// other (fail=open) or are refused (fail=closed). No model: only
/// invariants. Each key has a fixed limit; an admission happens only while
/// the key's count in its window is below the limit and adds exactly one
/// to it, so a resident key never exceeds its limit in any window.
pub fn table_tiny(data: &[u8]) {
    let mut b = Bytes(data);
    let w = window_from(&mut b);
    let seed = [b.u32(), b.u32()];
    let policy = if b.u8() & 1 == 0 {
        FailPolicy::Open
    } else {
        FailPolicy::Closed
    };
    let nkeys = usize::from(b.u8() % 64) + 1;
    let mut buf = Region::new(Table::HEADER_BYTES + 2 * PROBE * SLOT_BYTES);
    let len = buf.len();
    // SAFETY: an exclusive, 64-byte aligned buffer that outlives the table.
    let table = unsafe { Table::init(buf.ptr(), len, w, seed) }.expect("init");
    assert_eq!(table.capacity(), 2 * PROBE);
    let limit_of = |k: usize| [0, 1, 2, 3, 5, 8, 13][k % 7];
    let reset_max = w.ms().div_ceil(1000) as u32;
    let mut now = T0;
    let mut admissions: Vec<Admission> = vec![];
    let mut fail_closed = 0u64;
    let mut ops = 0;
    while !b.done() && ops < 4096 {
        ops += 1;
        let tag = b.u8();
        if tag % 16 == 15 {
            let nth = usize::from(b.u8());
            if !admissions.is_empty() {
                let a = admissions.remove(nth % admissions.len());
                table.undo(&a);
            }
            continue;
        }
        now = now.saturating_add_signed(step(tag, &mut b));
        let k = usize::from(b.u8()) % nkeys;
        let limit = limit_of(k);
        let h = hash_with_seed(seed, &(k as u32).to_le_bytes());
        let before = table.peek(h, now);
        let d = table.acquire(h, now, limit, policy, k);
        let after = table.peek(h, now);
        let ctx = format!(
            "key {k} now {now} limit {limit} {policy:?} window {} ms",
            w.ms()
        );
        assert!(
            (1..=reset_max).contains(&d.reset_s),
            "reset_s {}: {ctx}",
            d.reset_s
        );
        match d.outcome {
            Outcome::Admitted => {
                let a = d.admission.expect("admitted without admission");
                assert!(limit > 0, "admitted over limit 0: {ctx}");
                assert_eq!(d.retry_after_s, 0, "{ctx}");
                assert!(d.remaining < limit && d.estimate < limit, "{ctx}");
                assert!(
                    before.current < limit,
                    "count {} at limit: {ctx}",
                    before.current
                );
                assert_eq!(after.window_index, a.window_index(), "{ctx}");
                assert_eq!(after.current, before.current + 1, "{ctx}");
                assert!(after.current <= limit, "{ctx}");
                admissions.push(a);
            }
            Outcome::Rejected => {
                assert!(d.admission.is_none() && d.remaining == 0, "{ctx}");
                assert!(d.retry_after_s > 0, "{ctx}");
                assert_eq!(after, before, "a rejection changed the counts: {ctx}");
            }
            Outcome::FailClosed => {
                assert_eq!(policy, FailPolicy::Closed, "{ctx}");
                assert!(
                    d.admission.is_none() && d.remaining == 0 && d.estimate == 0,
                    "{ctx}"
                );
                assert_eq!(d.retry_after_s, d.reset_s, "{ctx}");
                fail_closed += 1;
            }
        }
        if policy == FailPolicy::Closed {
            assert!(
                !d.events.evicted_live,
                "evicted a live key under fail=closed: {ctx}"
            );
        }
    }
    assert_eq!(table.counter(Counter::FailClosed), fail_closed);
}

/// A state file (`state=`): decoding any bytes never panics; a decoded
/// file encodes to bytes that decode to the same content; its table
/// restores (or is refused) into a small fresh table of either capacity
/// without panicking.
pub fn state_file(data: &[u8]) {
    use rate_limit_window_core::rule::mode::Mode;
    use rate_limit_window_core::state::{decode, encode};
    let Ok(f) = decode(data) else {
        return;
    };
    assert_eq!(decode(&encode(&f)).expect("re-encoded file"), f);
    let slots = if f.table.capacity == 64 { 64 } else { 32 };
    let mut buf = Region::new(Table::HEADER_BYTES + slots * SLOT_BYTES);
    let len = buf.len();
    let w = Window::from_ms(60_000).expect("window");
    let mode = if f.table.strict {
        Mode::Strict
    } else {
        Mode::Estimate
    };
    // SAFETY: an exclusive, 64-byte aligned buffer that outlives the table.
    let t = unsafe { Table::init_mode(buf.ptr(), len, w, f.seed, mode) }.expect("init");
    let now = T0.wrapping_add(f.saved_ms % 1_000_000);
    let _ = t.restore(&f.table, now);
    restore_overrides(&f.overrides, now);
}

/// A decoded file's overrides restored into a small override table: never
/// a panic; every live entry restored is found, as saved, until the table
/// is full.
fn restore_overrides(entries: &[rate_limit_window_core::overrides::Entry], now: u64) {
    use rate_limit_window_core::overrides::Overrides;
    let cap = 4;
    let mut buf = Region::new(Overrides::bytes_for(cap));
    let len = buf.len();
    // SAFETY: an exclusive, 64-byte aligned buffer that outlives the table.
    let o = unsafe { Overrides::init(buf.ptr(), len, cap) }.expect("init");
    for e in entries {
        match o.restore(*e, now) {
            Ok(true) => assert_eq!(o.get(e.fp, now), Some(*e)),
            Ok(false) => assert!(e.expired(now)),
            Err(full) => assert_eq!(full.capacity, cap),
        }
    }
}

/// `parse_body` of an override PUT: never panics; an accepted body is one
/// action (never a ban), within range, and its JSON parses back the same;
/// a rejected one has a message.
pub fn override_body(data: &[u8]) {
    use rate_limit_window_core::overrides::body::{parse_body, MAX_BODY, MAX_TTL_S};
    use rate_limit_window_core::overrides::Action;
    match parse_body(data) {
        Ok(b) => {
            assert!(data.len() <= MAX_BODY);
            assert!(b.action != Action::Ban);
            match b.action {
                Action::Limit(n) => assert!(n <= MAX_LIMIT),
                Action::InFlight(n) => {
                    assert!(n <= rate_limit_window_core::shm::places::MAX_IN_FLIGHT)
                }
                _ => {}
            }
            assert!(b.ttl_s.is_none_or(|t| (1..=MAX_TTL_S).contains(&t)));
            assert_eq!(parse_body(b.to_json().as_bytes()), Ok(b));
        }
        Err(e) => assert!(!e.is_empty()),
    }
}
