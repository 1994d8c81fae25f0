//! The one number-or-variable type of the configuration: `limit=` and
//! `cost=` of `rate_limit_window` are each a fixed number of requests or a
//! complex value evaluated per request.

use nginx_sys::{ngx_conf_t, ngx_http_complex_value_t};
use rate_limit_window_core::conf::parse::ValueSpec;

use crate::ffi::conf_ext::{ConfExt, ConfResult};

/// A number of requests, fixed or from a variable (`limit=`, `cost=`).
#[derive(Clone, Copy)]
pub enum ConfValue {
    /// A fixed number of requests.
    Fixed(u32),
    /// A complex value evaluated per request (`limit=$plan_limit`,
    /// `cost=$bulk_cost`), compiled into the configuration pool.
    Variable(*mut ngx_http_complex_value_t),
}

impl ConfValue {
    /// The complex value of a `$variable` value (None: a fixed number).
    pub fn variable(self) -> Option<*mut ngx_http_complex_value_t> {
        match self {
            ConfValue::Fixed(_) => None,
            ConfValue::Variable(cv) => Some(cv),
        }
    }

    /// Compiles `spec` for the configuration being parsed.
    pub fn compile(cf: &ngx_conf_t, spec: &ValueSpec) -> ConfResult<ConfValue> {
        Ok(match spec {
            ValueSpec::Fixed(n) => ConfValue::Fixed(*n),
            ValueSpec::Variable(text) => ConfValue::Variable(cf.compile(text)?),
        })
    }
}
