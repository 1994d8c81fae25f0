//! The stream module's variables, for a stream `log_format`:
//! `$rate_limit_window_status` (PASSED, REJECTED, REJECTED_IN_FLIGHT,
//! REJECTED_DRY_RUN, EXEMPT; empty when no limit applied),
//! `$rate_limit_window_limit` and `$rate_limit_window_remaining` (the
//! tightest limit that applied, and what is left under it) and
//! `$rate_limit_window_retry_after` (seconds, on a refused session), read
//! from what the handler kept in the session's context ([`Report`]).

use nginx_sys::{
    ngx_conf_t, ngx_int_t, ngx_str_t, ngx_stream_session_t, ngx_stream_variable_value_t,
    ngx_uint_t, NGX_STREAM_VAR_NOCACHEABLE,
};
use ngx::core::Status;
use ngx::ngx_string;

use crate::ffi::conf_ext::ConfExt;
use crate::ffi::session::Session;
use crate::ffi::stream_weak::{self, rlw_stream_add_variable};
use crate::request::record::RequestStatus;

/// What a session's decision leaves for its variables.
#[derive(Clone, Copy)]
pub struct Report {
    pub status: RequestStatus,
    /// The tightest limit that applied (requests per window) and what is
    /// left under it; None: no rate applied.
    pub tightest: Option<(u32, u32)>,
    /// Seconds until the session would fit, on a refusal (else 0).
    pub retry_after_s: u32,
}

/// The `[emerg]` of a `stream {}` block when nginx's stream module was
/// loaded after this one (its functions were not there to link to).
const NOT_LINKED: &str = "ngx_stream_rate_limit_window_module needs nginx's stream module loaded \
     before it: put \"load_module modules/ngx_stream_module.so;\" before this module's \
     load_module line";

/// A variable's getter, as nginx's stream wants it.
type Getter = unsafe extern "C" fn(
    *mut ngx_stream_session_t,
    *mut ngx_stream_variable_value_t,
    usize,
) -> ngx_int_t;

/// Adds the variables (preconfiguration).
pub extern "C" fn register(cf: *mut ngx_conf_t) -> ngx_int_t {
    if !stream_weak::linked() {
        // A stream block, but the stream module was loaded after this one.
        // SAFETY: nginx passes the configuration being parsed.
        let cf = unsafe { &*cf };
        cf.emerg(NOT_LINKED);
        return Status::NGX_ERROR.into();
    }
    let vars: [(ngx_str_t, Getter); 4] = [
        (ngx_string!("rate_limit_window_status"), get_status),
        (ngx_string!("rate_limit_window_limit"), get_limit),
        (ngx_string!("rate_limit_window_remaining"), get_remaining),
        (
            ngx_string!("rate_limit_window_retry_after"),
            get_retry_after,
        ),
    ];
    for (mut name, get) in vars {
        // SAFETY: cf is the stream block's configuration; nginx copies the
        // name; a non-null v is the variable it just created, ours to set.
        let added = unsafe {
            let v =
                rlw_stream_add_variable(cf, &mut name, NGX_STREAM_VAR_NOCACHEABLE as ngx_uint_t);
            if let Some(v) = v.as_mut() {
                v.get_handler = Some(get);
                v.data = 0;
            }
            !v.is_null()
        };
        if !added {
            return Status::NGX_ERROR.into();
        }
    }
    Status::NGX_OK.into()
}

/// The getter `$name` over `$text`, which reads the session's [`Report`]
/// (None: the variable is empty).
macro_rules! getter {
    ($name:ident, $text:expr) => {
        unsafe extern "C" fn $name(
            s: *mut ngx_stream_session_t,
            v: *mut ngx_stream_variable_value_t,
            _data: usize,
        ) -> ngx_int_t {
            // SAFETY: nginx passes a live session and the value to fill.
            let (s, v) = unsafe { (Session::from_ptr(s), &mut *v) };
            let report = s.ctx::<Report>(super::module());
            let text: Option<String> = report.and_then($text);
            let bytes = text.as_deref().unwrap_or("").as_bytes();
            match s.set_value(v, bytes) {
                Ok(()) => Status::NGX_OK.into(),
                Err(()) => Status::NGX_ERROR.into(),
            }
        }
    };
}

getter!(get_status, |r: &Report| Some(r.status.as_str().to_string()));
getter!(get_limit, |r: &Report| r.tightest.map(|t| t.0.to_string()));
getter!(get_remaining, |r: &Report| r
    .tightest
    .map(|t| t.1.to_string()));
getter!(get_retry_after, |r: &Report| r
    .status
    .refused()
    .then(|| r.retry_after_s.to_string()));
