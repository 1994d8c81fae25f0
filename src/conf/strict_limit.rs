//! A fixed `limit=` above what a `mode=strict` zone can count
//! ([`MAX_STRICT_LIMIT`], 65,535): refused at `nginx -t`, whether the zone
//! is declared before the directive or after it (then at the end of
//! http{}), never answered `RateLimit-Remaining: 65534` under
//! `RateLimit-Limit: 100000`.

use nginx_sys::{ngx_conf_t, ngx_uint_t, NGX_LOG_EMERG};
use rate_limit_window_core::conf::error::LimitConfError;
use rate_limit_window_core::rule::mode::Mode;
use rate_limit_window_core::rule::strict::MAX_STRICT_LIMIT;

use crate::conf::value::ConfValue;
use crate::ffi::conf_ext::{ConfAt, ConfExt, ConfFailed, ConfResult};
use crate::zone::ZoneConf;

/// Why a strict zone refuses `limit`.
fn refusal(zone: &ZoneConf, limit: u32) -> LimitConfError {
    LimitConfError::StrictLimit(zone.name.as_bytes().to_vec(), limit, MAX_STRICT_LIMIT)
}

/// The `limit=` `value` of a `rate_limit_window` on `zone`, given at `at`:
/// refused now if the zone is strict and the value above what it counts,
/// noted for [`check_zone`] if the zone is declared later.
pub fn note<C: Copy>(
    cf: &ngx_conf_t,
    zone: &mut ZoneConf,
    value: ConfValue<C>,
    at: ConfAt,
) -> ConfResult {
    let ConfValue::Fixed(limit) = value else {
        return Ok(());
    };
    if limit <= MAX_STRICT_LIMIT {
        return Ok(());
    }
    if zone.defined && zone.mode == Mode::Strict {
        return Err(cf.emerg(refusal(zone, limit)));
    }
    if zone.big_limit_at.is_none_or(|(m, _)| limit > m) {
        zone.big_limit_at = Some((limit, at));
    }
    Ok(())
}

/// After http{} (or stream{}) is parsed: a strict zone declared after a `limit=` it
/// cannot count; the `[emerg]` names that line.
pub fn check_zone(cf: &mut ngx_conf_t, zone: &ZoneConf) -> ConfResult {
    match zone.big_limit_at {
        Some((limit, at)) if zone.mode == Mode::Strict => {
            let emerg = NGX_LOG_EMERG as ngx_uint_t;
            cf.log_at(at, emerg, &refusal(zone, limit));
            Err(ConfFailed::Logged)
        }
        _ => Ok(()),
    }
}
