//! The safe side of `ngx_conf_t`: [`ConfExt`] gives a directive handler
//! its arguments as byte slices, logs an `[emerg]` from a typed error (as
//! from the directive's line, or from a FILE:LINE noted earlier), and
//! compiles complex values, so that every directive handler is a safe
//! function past the one conversion of [`conf_handler!`] at its
//! `extern "C"` entry.

use core::ffi::{c_char, CStr};
use core::fmt::Display;
use core::ptr;

use nginx_sys::{
    ngx_conf_file_t, ngx_conf_t, ngx_http_compile_complex_value, ngx_http_compile_complex_value_t,
    ngx_http_complex_value_t, ngx_http_get_variable_index, ngx_str_t, ngx_uint_t, NGX_LOG_EMERG,
};
use ngx::core::{Pool, Status, NGX_CONF_ERROR, NGX_CONF_OK};
use ngx::ngx_conf_log_error;

/// Why a directive failed, once it is said.
#[derive(Clone, Copy, Debug)]
pub enum ConfFailed {
    /// An `[emerg]` is logged (by us or by nginx: a pool or compile error).
    Logged,
    /// nginx prints `"DIRECTIVE" directive TEXT` (`is duplicate`).
    Says(&'static CStr),
}

/// What a safe directive handler returns.
pub type ConfResult<T = ()> = Result<T, ConfFailed>;

/// A handler's result as nginx's configuration parser expects it.
pub fn conf_status(r: ConfResult) -> *mut c_char {
    match r {
        Ok(()) => NGX_CONF_OK,
        Err(ConfFailed::Logged) => NGX_CONF_ERROR,
        Err(ConfFailed::Says(text)) => text.as_ptr().cast_mut(),
    }
}

/// A FILE:LINE of the configuration (an empty name and line 0 outside a
/// file).
pub type ConfAt = (ngx_str_t, ngx_uint_t);

/// The directive handler `$name` (`extern "C"`, as `ngx_command_t.set`
/// wants it) over the safe `$body(cf: &ngx_conf_t, conf: &mut $conf)`,
/// where `$conf` is this module's configuration at the directive's level
/// (the command's `conf` offset: `MainConf` or `LocConf`).
macro_rules! conf_handler {
    ($(#[$m:meta])* $name:ident, $conf:ty, $body:expr) => {
        $(#[$m])*
        pub(crate) extern "C" fn $name(
            cf: *mut nginx_sys::ngx_conf_t,
            _cmd: *mut nginx_sys::ngx_command_t,
            conf: *mut core::ffi::c_void,
        ) -> *mut core::ffi::c_char {
            // SAFETY: nginx calls a directive handler with the configuration
            // being parsed and this module's configuration at the
            // directive's level, of the command's `conf` offset ($conf); both
            // are valid, and not otherwise borrowed, for the call.
            let (cf, conf) = unsafe { (&*cf, &mut *conf.cast::<$conf>()) };
            $crate::ffi::conf_ext::conf_status($body(cf, conf))
        }
    };
}
pub(crate) use conf_handler;

/// Safe access to the configuration being parsed.
pub trait ConfExt {
    /// The directive's words, its name first.
    fn args(&self) -> &[ngx_str_t];
    /// The directive's words from `from` on, as byte slices.
    fn words(&self, from: usize) -> Vec<&[u8]> {
        self.args()
            .get(from..)
            .unwrap_or_default()
            .iter()
            .map(|a| a.as_bytes())
            .collect()
    }
    /// Where the directive being parsed is.
    fn position(&self) -> ConfAt;
    /// Logs `e` as an `[emerg]` of the directive being parsed.
    fn emerg(&self, e: impl Display) -> ConfFailed;
    /// Logs `msg` at `level` as from `at` (nginx appends ` in FILE:LINE`).
    fn log_at(&mut self, at: ConfAt, level: ngx_uint_t, msg: &dyn Display);
    /// The configuration pool.
    fn pool(&self) -> Pool;
    /// A copy of `bytes` in the configuration pool.
    fn pool_str(&self, bytes: &[u8]) -> ConfResult<ngx_str_t>;
    /// Compiles `value` into `cv` (a complex value of the configuration).
    fn compile_into(&self, value: ngx_str_t, cv: &mut ngx_http_complex_value_t) -> ConfResult;
    /// Compiles `text` into a complex value allocated from the pool.
    fn compile(&self, text: &[u8]) -> ConfResult<*mut ngx_http_complex_value_t>;
    /// The index of variable `name` (registered if new).
    fn variable_index(&self, name: &[u8]) -> ConfResult<ngx_uint_t>;
    /// nginx's prefix and configuration prefix (both end in `/`).
    fn prefixes(&self) -> (&[u8], &[u8]);
}

impl ConfExt for ngx_conf_t {
    fn args(&self) -> &[ngx_str_t] {
        // SAFETY: cf->args is null or nginx's array of the directive's words,
        // filled before a handler is called; they live in the configuration
        // pool.
        unsafe { self.args.as_ref().map_or(&[], |a| a.as_slice()) }
    }

    fn position(&self) -> ConfAt {
        // SAFETY: cf->conf_file is set (or null) while a file is parsed.
        match unsafe { self.conf_file.as_ref() } {
            Some(f) => (f.file.name, f.line),
            None => (ngx_str_t::empty(), 0),
        }
    }

    fn emerg(&self, e: impl Display) -> ConfFailed {
        ngx_conf_log_error!(NGX_LOG_EMERG, ptr::from_ref(self).cast_mut(), "{}", e);
        ConfFailed::Logged
    }

    fn log_at(&mut self, at: ConfAt, level: ngx_uint_t, msg: &dyn Display) {
        // SAFETY: a zeroed ngx_conf_file_t is a closed file with no buffer;
        // this stand-in lives on this stack frame until conf_file is
        // restored below, and nginx's logger only reads its name and line.
        let mut stand_in: ngx_conf_file_t = unsafe { core::mem::zeroed() };
        stand_in.file.name = at.0;
        stand_in.line = at.1;
        let saved = core::mem::replace(&mut self.conf_file, &mut stand_in);
        ngx_conf_log_error!(level, self, "{}", msg);
        self.conf_file = saved;
    }

    fn pool(&self) -> Pool {
        // SAFETY: cf->pool is the cycle's configuration pool.
        unsafe { Pool::from_ngx_pool(self.pool) }
    }

    fn pool_str(&self, bytes: &[u8]) -> ConfResult<ngx_str_t> {
        // SAFETY: cf->pool is the configuration pool; the copy lives there.
        unsafe { ngx_str_t::from_bytes(self.pool, bytes) }.ok_or(ConfFailed::Logged)
    }

    fn compile_into(&self, value: ngx_str_t, cv: &mut ngx_http_complex_value_t) -> ConfResult {
        compile_complex(self, value, cv)
    }

    fn compile(&self, text: &[u8]) -> ConfResult<*mut ngx_http_complex_value_t> {
        let value = self.pool_str(text)?;
        let cv = self.pool().calloc_type::<ngx_http_complex_value_t>();
        if cv.is_null() {
            return Err(ConfFailed::Logged);
        }
        compile_complex(self, value, cv)?;
        Ok(cv)
    }

    fn variable_index(&self, name: &[u8]) -> ConfResult<ngx_uint_t> {
        let mut name = self.pool_str(name)?;
        let cf = ptr::from_ref(self).cast_mut();
        // SAFETY: cf is valid; nginx copies the (lowercased) name into its
        // own pool and registers it in the http main configuration.
        let index = unsafe { ngx_http_get_variable_index(cf, &mut name) };
        ngx_uint_t::try_from(index).map_err(|_| ConfFailed::Logged)
    }

    fn prefixes(&self) -> (&[u8], &[u8]) {
        // SAFETY: cf->cycle is the cycle being configured, alive for the parse.
        let cycle = unsafe { &*self.cycle };
        (cycle.prefix.as_bytes(), cycle.conf_prefix.as_bytes())
    }
}

/// Compiles `value` into `cv`: pool memory of the configuration (zeroed, or
/// a field of a pool-allocated struct), which nginx fills in.
fn compile_complex(
    cf: &ngx_conf_t,
    value: ngx_str_t,
    cv: *mut ngx_http_complex_value_t,
) -> ConfResult {
    let mut value = value;
    // SAFETY: all-zero is a valid compile request (null pointers, no
    // flags): nginx's own modules start from ngx_memzero.
    let mut ccv: ngx_http_compile_complex_value_t = unsafe { core::mem::zeroed() };
    ccv.cf = ptr::from_ref(cf).cast_mut();
    ccv.value = &mut value;
    ccv.complex_value = cv;
    // SAFETY: ccv is set up as nginx's own modules do (cv is the callers'
    // pool memory); nginx copies what it needs into the configuration pool
    // and does not write to cf.
    let rc = unsafe { ngx_http_compile_complex_value(&mut ccv) };
    if rc != Status::NGX_OK.into() {
        return Err(ConfFailed::Logged);
    }
    Ok(())
}
