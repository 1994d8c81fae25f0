//! Commands that Redis refuses to the sync's user for its ACL (`NOPERM`):
//! found in a call's replies by the sync thread, kept in the zone header
//! (the name packed in 8 bytes) and logged once per command by worker 0,
//! naming the command and the ACL fix.

use std::sync::atomic::Ordering;

use nginx_sys::{ngx_log_t, NGX_LOG_ERR};
use ngx::ngx_log_error;
use redis::Value;

use crate::zone::{ZoneConf, ZoneHeader};

/// What a script's denied command is packed as (Redis does not name it).
const SCRIPT: &[u8] = b"script";

/// What a `CLUSTER` subcommand's name (`cluster|slots`) is packed as, to
/// fit: `C|slots` (every other name is packed in lowercase).
const CLUSTER: (&str, &str) = ("cluster|", "C|");

/// `name` (8 bytes at most, lowercase; a `CLUSTER` subcommand shortened)
/// packed in a word (never 0).
fn pack(name: &[u8]) -> u64 {
    let lower = name.to_ascii_lowercase();
    let short = match lower.strip_prefix(CLUSTER.0.as_bytes()) {
        Some(sub) => [CLUSTER.1.as_bytes(), sub].concat(),
        None => lower,
    };
    let mut b = [0u8; 8];
    for (d, s) in b.iter_mut().zip(&short) {
        *d = *s;
    }
    u64::from_le_bytes(b)
}

/// The name packed in `w`.
fn unpack(w: u64) -> String {
    let b = w.to_le_bytes();
    let n = b.iter().position(|&c| c == 0).unwrap_or(8);
    let name = String::from_utf8_lossy(&b[..n]).into_owned();
    match name.strip_prefix(CLUSTER.1) {
        Some(sub) => format!("{}{sub}", CLUSTER.0),
        None => name,
    }
}

/// The command an error reply says the ACL refused, packed (None: not a
/// refusal by the ACL). `NOPERM … run the 'hget' command`, or a script's
/// `ERR The user executing the script can't run this command …`.
pub fn refused(replies: &[Value]) -> Option<u64> {
    replies.iter().find_map(|v| {
        let Value::ServerError(e) = v else {
            return None;
        };
        let detail = e.details().unwrap_or("");
        match e.code() {
            "NOPERM" => {
                let name = detail.split('\'').nth(1).filter(|n| !n.is_empty())?;
                Some(pack(name.as_bytes()))
            }
            _ if detail.contains("executing the script can't run") => Some(pack(SCRIPT)),
            _ => None,
        }
    })
}

/// Notes a refused command for worker 0's log.
pub fn note(header: &ZoneHeader, packed: u64) {
    header.denied_cmd.store(packed, Ordering::Relaxed);
}

/// Logs, once per command, the command the ACL refused and the fix.
pub fn log(log: *mut ngx_log_t, zone: &ZoneConf, header: &ZoneHeader) {
    let w = header.denied_cmd.load(Ordering::Relaxed);
    if w == 0 || header.logged_denied.swap(w, Ordering::Relaxed) == w {
        return;
    }
    let name = unpack(w);
    let (what, fix) = if name.as_bytes() == SCRIPT {
        (
            "a command of the overrides' script (EVAL)".to_string(),
            "every command docs/gateways.md lists".to_string(),
        )
    } else {
        (
            format!("the command {}", name.to_ascii_uppercase()),
            format!("+{name}"),
        )
    };
    ngx_log_error!(
        NGX_LOG_ERR,
        log,
        "rate_limit_window_zone \"{}\": redis refused {} to the sync's user (NOPERM): add \
         \"{}\" to the user's ACL (docs/gateways.md lists every command the sync uses)",
        zone.name_str(),
        what,
        fix
    );
}
