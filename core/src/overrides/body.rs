//! The JSON body of an override `PUT`: `{"limit": N}`, `{"in_flight": N}`,
//! `{"block": true}` or `{"exempt": true}`, with an optional
//! `"ttl": SECONDS`.
//!
//! Strict: one JSON object, exactly one of `limit`, `in_flight`, `block`,
//! `exempt` (an override is one action), no other field, no field twice;
//! `limit` an integer from 0 to [`MAX_LIMIT`], `in_flight` one from 0 to
//! [`MAX_IN_FLIGHT`], `ttl` one from 1 to [`MAX_TTL_S`]; `block` and
//! `exempt` only `true`. Anything else is an error whose text the API
//! answers in `{"error": "…"}`. It never panics (fuzzed:
//! `fuzz/fuzz_targets/override_body.rs`).

use crate::overrides::Action;
use crate::rule::window::MAX_LIMIT;
use crate::shm::places::MAX_IN_FLIGHT;

/// Largest body, in bytes.
pub const MAX_BODY: usize = 4096;
/// Largest `ttl`, in seconds (10 years).
pub const MAX_TTL_S: u64 = 10 * 365 * 86_400;

/// A parsed body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Body {
    /// Never [`Action::Ban`].
    pub action: Action,
    /// Seconds the override lasts (None: until removed).
    pub ttl_s: Option<u64>,
}

impl Body {
    /// The body as JSON (what [`parse_body`] reads back).
    pub fn to_json(&self) -> String {
        let a = match self.action {
            Action::Limit(n) => format!("\"limit\":{n}"),
            Action::InFlight(n) => format!("\"in_flight\":{n}"),
            Action::Block | Action::Ban => "\"block\":true".into(),
            Action::Exempt => "\"exempt\":true".into(),
        };
        match self.ttl_s {
            Some(t) => format!("{{{a},\"ttl\":{t}}}"),
            None => format!("{{{a}}}"),
        }
    }
}

/// A JSON value as far as the body needs it.
enum Value {
    /// A number: its text as written (JSON grammar checked).
    Number(Vec<u8>),
    Bool(bool),
    Null,
    Str,
    /// `[` or `{`: never valid for a field of the body.
    Nested,
}

/// A cursor over the body.
struct Cursor<'a> {
    s: &'a [u8],
    at: usize,
}

type Res<T> = Result<T, String>;

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.at).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        self.ws();
        if self.peek() == Some(c) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: u8, what: &str) -> Res<()> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(format!("not JSON: expected {what} at byte {}", self.at))
        }
    }

    /// A JSON string (after its opening quote), decoded.
    fn string(&mut self) -> Res<Vec<u8>> {
        let mut out = Vec::new();
        loop {
            let Some(c) = self.peek() else {
                return Err("not JSON: unterminated string".into());
            };
            self.at += 1;
            match c {
                b'"' => return Ok(out),
                b'\\' => self.escape(&mut out)?,
                0..=0x1f => return Err("not JSON: control character in a string".into()),
                _ => out.push(c),
            }
        }
    }

    fn escape(&mut self, out: &mut Vec<u8>) -> Res<()> {
        let c = self.peek().ok_or("not JSON: unterminated string")?;
        self.at += 1;
        let b = match c {
            b'"' | b'\\' | b'/' => c,
            b'b' => 8,
            b'f' => 12,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'u' => {
                let hex = self
                    .s
                    .get(self.at..self.at + 4)
                    .ok_or("not JSON: bad \\u")?;
                if !hex.iter().all(u8::is_ascii_hexdigit) {
                    return Err("not JSON: bad \\u escape".into());
                }
                self.at += 4;
                // Field names are ASCII: anything else just won't match.
                let v = hex
                    .iter()
                    .fold(0u32, |v, h| v * 16 + (*h as char).to_digit(16).unwrap_or(0));
                u8::try_from(v).unwrap_or(0xff)
            }
            _ => return Err("not JSON: bad escape in a string".into()),
        };
        out.push(b);
        Ok(())
    }

    fn literal(&mut self, word: &[u8], v: Value) -> Res<Value> {
        if self.s.get(self.at..self.at + word.len()) == Some(word) {
            self.at += word.len();
            Ok(v)
        } else {
            Err(format!("not JSON: unexpected token at byte {}", self.at))
        }
    }

    /// A JSON number's text (grammar checked).
    fn number(&mut self) -> Res<Value> {
        let start = self.at;
        let digits = |c: &mut Cursor| {
            let from = c.at;
            while c.peek().is_some_and(|b| b.is_ascii_digit()) {
                c.at += 1;
            }
            c.at - from
        };
        self.eat_one(b'-');
        let int_start = self.at;
        let n = digits(self);
        let leading_zero = n > 1 && self.s.get(int_start) == Some(&b'0');
        if n == 0 || leading_zero {
            return Err(format!("not JSON: bad number at byte {start}"));
        }
        if self.eat_one(b'.') && digits(self) == 0 {
            return Err(format!("not JSON: bad number at byte {start}"));
        }
        if self.eat_one(b'e') || self.eat_one(b'E') {
            if !self.eat_one(b'+') {
                self.eat_one(b'-');
            }
            if digits(self) == 0 {
                return Err(format!("not JSON: bad number at byte {start}"));
            }
        }
        Ok(Value::Number(self.s[start..self.at].to_vec()))
    }

    fn eat_one(&mut self, c: u8) -> bool {
        let hit = self.peek() == Some(c);
        if hit {
            self.at += 1;
        }
        hit
    }

    fn value(&mut self) -> Res<Value> {
        self.ws();
        match self.peek() {
            Some(b'"') => {
                self.at += 1;
                self.string().map(|_| Value::Str)
            }
            Some(b't') => self.literal(b"true", Value::Bool(true)),
            Some(b'f') => self.literal(b"false", Value::Bool(false)),
            Some(b'n') => self.literal(b"null", Value::Null),
            Some(b'[' | b'{') => Ok(Value::Nested),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(format!("not JSON: expected a value at byte {}", self.at)),
        }
    }
}

/// An integer field from `min` to `max`: `what` names it in errors, every
/// one of which says the range.
fn integer(v: &Value, what: &str, (min, max): (u64, u64)) -> Res<u64> {
    let range = format!("an integer from {min} to {max}");
    let Value::Number(t) = v else {
        return Err(format!("\"{what}\" must be {range}"));
    };
    if t.first() == Some(&b'-') {
        return Err(format!("\"{what}\" must not be negative: {range}"));
    }
    if t.iter().any(|c| matches!(c, b'.' | b'e' | b'E')) {
        return Err(format!("\"{what}\" must be a whole number: {range}"));
    }
    let n = t.iter().try_fold(0u64, |n, d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    });
    match n {
        Some(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(format!("\"{what}\" must be {range}")),
    }
}

/// `true`, the only value of `block` and `exempt`.
fn yes(v: &Value, what: &str) -> Res<()> {
    match v {
        Value::Bool(true) => Ok(()),
        _ => Err(format!(
            "\"{what}\" must be true (DELETE with &override removes an override)"
        )),
    }
}

/// What a body without, or with more than, one action is told.
const ONE_ACTION: &str =
    "give one of limit, in_flight, block or exempt (e.g. {\"limit\": 100}), not two";
/// What a body with no action is told.
const NO_ACTION: &str = "give one of limit, in_flight, block or exempt (e.g. {\"limit\": 100})";

/// The bit of a known field in [`Fields::seen`] (0: unknown).
fn field_bit(name: &[u8]) -> u8 {
    match name {
        b"limit" => 1,
        b"block" => 2,
        b"exempt" => 4,
        b"ttl" => 8,
        b"in_flight" => 16,
        _ => 0,
    }
}

/// The fields seen so far.
#[derive(Default)]
struct Fields {
    action: Option<Action>,
    ttl: Option<u64>,
    /// Known fields met ([`field_bit`]): a second one is a duplicate.
    seen: u8,
}

impl Fields {
    fn set(&mut self, name: &[u8], v: &Value) -> Res<()> {
        if self.seen & field_bit(name) != 0 {
            return Err(format!(
                "duplicate field \"{}\": give it once",
                crate::units::escape(name)
            ));
        }
        self.seen |= field_bit(name);
        let action = match name {
            b"limit" => Action::Limit(integer(v, "limit", (0, u64::from(MAX_LIMIT)))? as u32),
            b"in_flight" => {
                let n = integer(v, "in_flight", (0, u64::from(MAX_IN_FLIGHT)))?;
                Action::InFlight(n as u32)
            }
            b"block" => yes(v, "block").map(|_| Action::Block)?,
            b"exempt" => yes(v, "exempt").map(|_| Action::Exempt)?,
            b"ttl" => {
                self.ttl = Some(integer(v, "ttl", (1, MAX_TTL_S))?);
                return Ok(());
            }
            other => {
                return Err(format!(
                    "unknown field \"{}\": use limit, in_flight, block or exempt, and ttl",
                    crate::units::escape(other)
                ))
            }
        };
        if self.action.is_some() {
            return Err(ONE_ACTION.into());
        }
        self.action = Some(action);
        Ok(())
    }
}

/// Parses an override body. Err is the message for `{"error": …}`.
pub fn parse_body(body: &[u8]) -> Result<Body, String> {
    if body.len() > MAX_BODY {
        return Err(format!("body over {MAX_BODY} bytes"));
    }
    let mut c = Cursor { s: body, at: 0 };
    c.ws();
    let mut probe = Cursor { s: body, at: c.at };
    if c.peek() != Some(b'{') && probe.value().is_ok() {
        // A JSON value, but not an object.
        return Err(
            "not an object: the body must be one JSON object, e.g. {\"limit\": 100}".into(),
        );
    }
    c.expect(b'{', "an object")?;
    let mut f = Fields::default();
    if !c.eat(b'}') {
        loop {
            c.expect(b'"', "a field name")?;
            let name = c.string()?;
            c.expect(b':', "':'")?;
            let v = c.value()?;
            f.set(&name, &v)?;
            if c.eat(b'}') {
                break;
            }
            c.expect(b',', "',' or '}'")?;
        }
    }
    c.ws();
    if c.at != body.len() {
        return Err(format!("not JSON: trailing bytes at byte {}", c.at));
    }
    let action = f.action.ok_or(NO_ACTION)?;
    Ok(Body {
        action,
        ttl_s: f.ttl,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The texts an operator reads, each field's range said the same way,
    /// whichever way the value is out of it (issue 45).
    #[test]
    fn error_texts_are_consistent() {
        let err = |s: &str| parse_body(s.as_bytes()).unwrap_err();
        let ttl = "\"ttl\" must be an integer from 1 to 315360000";
        assert_eq!(err(r#"{"limit":5,"ttl":0}"#), ttl);
        assert_eq!(err(r#"{"limit":5,"ttl":315360001}"#), ttl);
        assert_eq!(err(r#"{"limit":5,"ttl":"60"}"#), ttl);
        assert_eq!(
            err(r#"{"limit":5,"ttl":-1}"#),
            format!("\"ttl\" must not be negative: an integer from 1 to 315360000")
        );
        let limit = "\"limit\" must be an integer from 0 to 1000000";
        assert_eq!(err(r#"{"limit":1000001}"#), limit);
        assert_eq!(
            err(r#"{"limit":1.5}"#),
            format!("\"limit\" must be a whole number: an integer from 0 to 1000000")
        );
        assert_eq!(
            err("[1]"),
            "not an object: the body must be one JSON object, e.g. {\"limit\": 100}"
        );
        assert_eq!(err("5"), err("[1]"));
        assert_eq!(
            err(r#"{"limit":5,"limit":6}"#),
            "duplicate field \"limit\": give it once"
        );
        assert_eq!(
            err(r#"{"block":true,"block":true}"#),
            "duplicate field \"block\": give it once"
        );
        assert_eq!(
            err(r#"{"limit":5,"ttl":1,"ttl":2}"#),
            "duplicate field \"ttl\": give it once"
        );
        let two = "give one of limit, in_flight, block or exempt (e.g. {\"limit\": 100}), not two";
        assert_eq!(err(r#"{"limit":5,"block":true}"#), two);
        // One override is one action: a limit and places are two.
        assert_eq!(err(r#"{"limit":5,"in_flight":2}"#), two);
        assert_eq!(err(r#"{"in_flight":2,"exempt":true}"#), two);
        assert_eq!(
            err("{}"),
            "give one of limit, in_flight, block or exempt (e.g. {\"limit\": 100})"
        );
        assert_eq!(err(r#"{"ttl":5}"#), err("{}"));
        // `in_flight` says its range as `limit` and `ttl` do.
        let places = "\"in_flight\" must be an integer from 0 to 65535";
        assert_eq!(err(r#"{"in_flight":65536}"#), places);
        assert_eq!(err(r#"{"in_flight":"2"}"#), places);
        assert_eq!(err(r#"{"in_flight":true}"#), places);
        assert_eq!(err(r#"{"in_flight":99999999999999999999999}"#), places);
        assert_eq!(
            err(r#"{"in_flight":-1}"#),
            "\"in_flight\" must not be negative: an integer from 0 to 65535"
        );
        assert_eq!(
            err(r#"{"in_flight":2.5}"#),
            "\"in_flight\" must be a whole number: an integer from 0 to 65535"
        );
        assert_eq!(
            err(r#"{"in_flight":1,"in_flight":2}"#),
            "duplicate field \"in_flight\": give it once"
        );
        assert_eq!(
            err(r#"{"inflight":2}"#),
            "unknown field \"inflight\": use limit, in_flight, block or exempt, and ttl"
        );
    }

    #[test]
    fn valid_bodies() {
        let ok = |s: &str| parse_body(s.as_bytes()).unwrap();
        assert_eq!(ok(r#"{"limit":5}"#).action, Action::Limit(5));
        assert_eq!(ok(r#" { "limit" : 0 , "ttl" : 60 } "#).ttl_s, Some(60));
        assert_eq!(ok(r#"{"limit":1000000}"#).action, Action::Limit(MAX_LIMIT));
        assert_eq!(ok(r#"{"block":true}"#).action, Action::Block);
        assert_eq!(ok(r#"{"ttl":1,"exempt":true}"#).action, Action::Exempt);
        assert_eq!(ok(r#"{"\u006cimit":7}"#).action, Action::Limit(7));
        assert_eq!(ok(r#"{"in_flight":0}"#).action, Action::InFlight(0));
        let b = ok(r#"{"ttl":30,"in_flight":65535}"#);
        assert_eq!((b.action, b.ttl_s), (Action::InFlight(65535), Some(30)));
    }

    #[test]
    fn bad_bodies() {
        let err = |s: &[u8]| parse_body(s).unwrap_err();
        assert!(err(b"").starts_with("not JSON"));
        assert!(err(b"limit=5").starts_with("not JSON"));
        assert!(err(b"{\"limit\":5").starts_with("not JSON"));
        assert!(err(b"{\"limit\":5}x").starts_with("not JSON"));
        assert!(err(b"{\"limit\":05}").starts_with("not JSON"));
        assert!(err(b"{\"limit\":-5}").contains("negative"));
        assert!(err(b"{\"limit\":1.5}").contains("whole"));
        assert!(err(b"{\"limit\":1e3}").contains("whole"));
        assert!(err(b"{\"limit\":1000001}").contains("from 0 to 1000000"));
        assert!(err(b"{\"limit\":99999999999999999999999}").contains("from 0"));
        assert!(err(b"{\"limit\":\"5\"}").contains("integer"));
        assert!(err(b"{\"limits\":5}").contains("unknown field"));
        assert!(err(b"{\"limit\":5,\"block\":true}").contains("one of"));
        assert_eq!(
            err(b"{\"limit\":5,\"limit\":6}"),
            "duplicate field \"limit\": give it once"
        );
        assert!(err(b"{\"block\":false}").contains("must be true"));
        assert!(err(b"{\"exempt\":1}").contains("must be true"));
        assert!(err(b"{\"ttl\":5}").contains("one of"));
        assert!(err(b"{\"limit\":5,\"ttl\":0}").contains("ttl"));
        assert!(err(b"{\"limit\":5,\"ttl\":-1}").contains("negative"));
        assert!(err(b"{\"limit\":5,\"ttl\":1,\"ttl\":2}").contains("duplicate"));
        assert!(err(b"{\"limit\":[5]}").contains("integer"));
        assert!(err(b"{}").contains("one of"));
        assert!(err(b"[]").starts_with("not an object"));
        assert!(err(b"x").starts_with("not JSON"));
        assert!(err(b"nope").starts_with("not JSON"));
        let big = format!("{{\"limit\":5{}}}", " ".repeat(MAX_BODY));
        assert!(err(big.as_bytes()).contains("4096"));
    }

    fn any_body() -> impl Strategy<Value = Body> {
        let action = prop_oneof![
            (0..=MAX_LIMIT).prop_map(Action::Limit),
            (0..=MAX_IN_FLIGHT).prop_map(Action::InFlight),
            Just(Action::Block),
            Just(Action::Exempt),
        ];
        (action, proptest::option::of(1..=MAX_TTL_S))
            .prop_map(|(action, ttl_s)| Body { action, ttl_s })
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = parse_body(&bytes);
        }

        #[test]
        fn json_like_text_never_panics(s in r#"[{}\[\]":, 0-9a-z.eE+\\-]{0,64}"#) {
            let _ = parse_body(s.as_bytes());
        }

        #[test]
        fn valid_bodies_round_trip(b in any_body()) {
            prop_assert_eq!(parse_body(b.to_json().as_bytes()), Ok(b));
        }

        #[test]
        fn a_changed_valid_body_is_valid_or_an_error(b in any_body(), at in 0usize..64, byte in any::<u8>()) {
            let mut s = b.to_json().into_bytes();
            let i = at % s.len();
            s[i] = byte;
            if let Ok(p) = parse_body(&s) {
                prop_assert!(p.action != Action::Ban);
            }
        }
    }
}
