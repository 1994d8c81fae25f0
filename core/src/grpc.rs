//! gRPC-native rejections: what a rejected gRPC call is told.
//!
//! gRPC clients map an HTTP 429 to `UNAVAILABLE` and retry at once. A gRPC
//! call this module rejects is instead answered the gRPC way, with a
//! trailers-only response (HTTP 200, `content-type: application/grpc`,
//! `grpc-status: 8` RESOURCE_EXHAUSTED, a `grpc-message`, and
//! `grpc-retry-pushback-ms`, which a client's retry policy honours: gRFC A6).
//! This module holds the pure parts: which requests are gRPC calls, the
//! message's percent-encoding (gRPC over HTTP/2, "Responses"), and the
//! pushback. The wait itself is the one Retry-After gives (see [`crate::rule::fit`]):
//! it is never computed a second way here.

/// `grpc-status` of a rejection: RESOURCE_EXHAUSTED.
pub const STATUS_RESOURCE_EXHAUSTED: u32 = 8;

/// The `content-type` of the answer.
pub const CONTENT_TYPE: &str = "application/grpc";

/// The human-readable reason, before percent-encoding (`grpc-message`).
pub const MESSAGE: &str = "rate limit exceeded";

/// Whether a request's `content-type` makes it a gRPC call:
/// `application/grpc`, alone or followed by `+format` (`+proto`, `+json`)
/// or by `;parameters`, ASCII case-insensitive. `application/grpc-web…`
/// (gRPC-Web, whose trailers travel in the body) is not.
pub fn is_grpc_content_type(ct: &[u8]) -> bool {
    let base = CONTENT_TYPE.as_bytes();
    if ct.len() < base.len() || !ct[..base.len()].eq_ignore_ascii_case(base) {
        return false;
    }
    matches!(ct.get(base.len()), None | Some(b'+' | b';'))
}

/// Whether `b` may appear unencoded in a `grpc-message`: printable ASCII
/// (space included) except `%`.
fn unreserved(b: u8) -> bool {
    (0x20..=0x7e).contains(&b) && b != b'%'
}

/// Percent-encodes `msg` as `grpc-message` requires: every byte outside
/// space..`~`, and `%` itself, becomes `%XX` (upper-case hex), so UTF-8
/// text survives as its bytes.
pub fn percent_encode(msg: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(msg.len());
    for &b in msg {
        if unreserved(b) {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(HEX[usize::from(b >> 4)] as char);
            out.push(HEX[usize::from(b & 0xf)] as char);
        }
    }
    out
}

/// `grpc-retry-pushback-ms` for a rejection whose Retry-After is
/// `retry_after_s` whole seconds: the same wait, in milliseconds (the
/// whole-second rounding up is kept, so a client that waits the pushback
/// is admitted, exactly as one that waits Retry-After).
pub fn pushback_ms(retry_after_s: u32) -> u64 {
    u64::from(retry_after_s) * 1000
}

/// The `grpc-message` of a rejection with a Retry-After of `retry_after_s`
/// seconds, percent-encoded.
pub fn message(retry_after_s: u32) -> String {
    percent_encode(format!("{MESSAGE}, retry in {retry_after_s} s").as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_content_types() {
        for ct in [
            "application/grpc",
            "application/grpc+proto",
            "application/grpc+json",
            "Application/GRPC",
            "application/grpc;charset=utf-8",
        ] {
            assert!(is_grpc_content_type(ct.as_bytes()), "{ct}");
        }
        for ct in [
            "",
            "application/json",
            "application/grp",
            "application/grpc-web",
            "application/grpc-web+proto",
            "application/grpcx",
            "text/application/grpc",
        ] {
            assert!(!is_grpc_content_type(ct.as_bytes()), "{ct}");
        }
    }

    #[test]
    fn percent_encoding_follows_the_grpc_spec() {
        assert_eq!(
            percent_encode(b"rate limit exceeded"),
            "rate limit exceeded"
        );
        assert_eq!(percent_encode(b"100% used"), "100%25 used");
        assert_eq!(percent_encode("caf\u{e9}".as_bytes()), "caf%C3%A9");
        assert_eq!(percent_encode(b"a\r\nb\x7f~ "), "a%0D%0Ab%7F~ ");
    }

    #[test]
    fn pushback_is_retry_after_in_ms() {
        assert_eq!(pushback_ms(0), 0);
        assert_eq!(pushback_ms(2), 2000);
        assert_eq!(pushback_ms(u32::MAX), 4_294_967_295_000);
        assert_eq!(message(58), "rate limit exceeded, retry in 58 s");
    }
}
