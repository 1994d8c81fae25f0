//! The one number-or-variable type of the configuration: `limit=` and
//! `cost=` of `rate_limit_window` are each a fixed number of requests or a
//! complex value evaluated per request.

use nginx_sys::{ngx_conf_t, ngx_http_complex_value_t, ngx_stream_complex_value_t};
use rate_limit_window_core::conf::parse::ValueSpec;

use crate::ffi::conf_ext::{ConfExt, ConfResult};

/// A number of requests, fixed or from a variable (`limit=`, `cost=`).
/// `C`: the block's complex value (http's, or the stream's).
#[derive(Clone, Copy)]
pub enum ConfValue<C: Copy = ngx_http_complex_value_t> {
    /// A fixed number of requests.
    Fixed(u32),
    /// A complex value evaluated per request (`limit=$plan_limit`,
    /// `cost=$bulk_cost`), compiled into the configuration pool.
    Variable(*mut C),
}

impl<C: Copy> ConfValue<C> {
    /// The complex value of a `$variable` value (None: a fixed number).
    pub fn variable(self) -> Option<*mut C> {
        match self {
            ConfValue::Fixed(_) => None,
            ConfValue::Variable(cv) => Some(cv),
        }
    }
}

impl ConfValue<ngx_stream_complex_value_t> {
    /// Compiles `spec` for the stream block being parsed.
    pub fn compile_stream(cf: &ngx_conf_t, spec: &ValueSpec) -> ConfResult<Self> {
        Ok(match spec {
            ValueSpec::Fixed(n) => ConfValue::Fixed(*n),
            ValueSpec::Variable(text) => {
                ConfValue::Variable(crate::ffi::stream_conf::compile(cf, text)?)
            }
        })
    }
}

impl ConfValue {
    /// Compiles `spec` for the configuration being parsed.
    pub fn compile(cf: &ngx_conf_t, spec: &ValueSpec) -> ConfResult<ConfValue> {
        Ok(match spec {
            ValueSpec::Fixed(n) => ConfValue::Fixed(*n),
            ValueSpec::Variable(text) => ConfValue::Variable(cf.compile(text)?),
        })
    }
}
