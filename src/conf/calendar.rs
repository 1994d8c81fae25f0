//! `delay=` on a `calendar=` zone, refused: a request over a calendar
//! quota fits only at the next period's start (hours or days away), so it
//! is refused with a Retry-After that says when. Refused whether the zone
//! is declared before the `rate_limit_window` or after it (then at the end
//! of http{}), as `charge=` on a strict zone is (`charge_var.rs`).

use nginx_sys::{ngx_conf_t, ngx_uint_t, NGX_LOG_EMERG};
use rate_limit_window_core::conf::error::LimitConfError;

use crate::ffi::conf_ext::{ConfAt, ConfExt, ConfFailed, ConfResult};
use crate::zone::ZoneConf;

/// Why a calendar zone refuses `delay=`.
fn refusal(zone: &ZoneConf) -> LimitConfError {
    LimitConfError::DelayOnCalendar(zone.name.as_bytes().to_vec())
}

/// Notes a `rate_limit_window` with `delay=` (`delay_ms` > 0) at `at` on
/// `zone`, refused at once when the zone is a calendar's.
pub fn note_delay(cf: &ngx_conf_t, zone: &mut ZoneConf, delay_ms: u64, at: ConfAt) -> ConfResult {
    if delay_ms == 0 {
        return Ok(());
    }
    if zone.defined && zone.window.calendar_of().is_some() {
        return Err(cf.emerg(refusal(zone)));
    }
    zone.delay_at.get_or_insert(at);
    Ok(())
}

/// After http{} is parsed: a zone declared after a `delay=` on it must not
/// be a calendar's; the `[emerg]` names the `delay=`'s line.
pub fn check_zone(cf: &mut ngx_conf_t, zone: &ZoneConf) -> ConfResult {
    match zone.delay_at {
        Some(at) if zone.window.calendar_of().is_some() => {
            let emerg = NGX_LOG_EMERG as ngx_uint_t;
            cf.log_at(at, emerg, &refusal(zone));
            Err(ConfFailed::Logged)
        }
        _ => Ok(()),
    }
}
