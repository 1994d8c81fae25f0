//! Configuration messages as from a given FILE:LINE: a check made after the
//! directive was parsed (an undefined zone after http{}, a location merged)
//! names the directive's line, not where the parser is then (the end of the
//! http block, which is no help).

use nginx_sys::{ngx_conf_file_t, ngx_conf_t, ngx_str_t, ngx_uint_t};
use ngx::ngx_conf_log_error;

/// `ngx_conf_log_error` at `level`, as from FILE:LINE (nginx appends
/// ` in FILE:LINE`).
///
/// # Safety
/// `cf` must be a valid configuration context.
pub unsafe fn log_at(
    cf: *mut ngx_conf_t,
    file: ngx_str_t,
    line: ngx_uint_t,
    level: ngx_uint_t,
    msg: &str,
) {
    // SAFETY: cf is valid (the caller's contract). A zeroed ngx_conf_file_t
    // is a closed file with no buffer; this stand-in lives on this stack
    // frame until conf_file is restored below, and nginx's logger only
    // reads its name and line.
    unsafe {
        let mut at: ngx_conf_file_t = core::mem::zeroed();
        at.file.name = file;
        at.line = line;
        let saved = (*cf).conf_file;
        (*cf).conf_file = &mut at;
        ngx_conf_log_error!(level, cf, "{}", msg);
        (*cf).conf_file = saved;
    }
}
