//! `charge=$variable` of `rate_limit_window`, at configuration: compiled
//! for the LOG phase (request/charge_read.rs reads it there), and refused on a
//! `mode=strict` zone, whether the zone is declared before the directive or
//! after it (then at the end of http{}).

use nginx_sys::{ngx_conf_t, ngx_http_complex_value_t, ngx_uint_t, NGX_LOG_EMERG};
use rate_limit_window_core::conf::error::LimitConfError;
use rate_limit_window_core::rule::mode::Mode;

use crate::ffi::conf_ext::{ConfAt, ConfExt, ConfFailed, ConfResult};
use crate::zone::ZoneConf;

/// Why a strict zone refuses `charge=`.
fn strict_refusal(zone: &ZoneConf) -> LimitConfError {
    LimitConfError::ChargeOnStrict(zone.name.as_bytes().to_vec())
}

/// Compiles `charge=` (`text`, None when the directive has none) of a
/// `rate_limit_window` on `zone`, and notes the zone as charged at `at`.
pub fn compile(
    cf: &ngx_conf_t,
    zone: &mut ZoneConf,
    text: Option<&[u8]>,
    at: ConfAt,
) -> ConfResult<Option<*mut ngx_http_complex_value_t>> {
    let Some(text) = text else {
        return Ok(None);
    };
    if zone.defined && zone.mode == Mode::Strict {
        return Err(cf.emerg(strict_refusal(zone)));
    }
    zone.charge_at.get_or_insert(at);
    cf.compile(text).map(Some)
}

/// After http{} is parsed: a zone declared after a `charge=` on it must not
/// be strict; the `[emerg]` names the `charge=`'s line.
pub fn check_zone(cf: &mut ngx_conf_t, zone: &ZoneConf) -> ConfResult {
    match zone.charge_at {
        Some(at) if zone.mode == Mode::Strict => {
            let emerg = NGX_LOG_EMERG as ngx_uint_t;
            cf.log_at(at, emerg, &strict_refusal(zone));
            Err(ConfFailed::Logged)
        }
        _ => Ok(()),
    }
}
