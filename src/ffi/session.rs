//! A stream session (`ngx_stream_session_t`: a TCP connection, or a UDP
//! client's session) behind safe calls: its log, its module
//! configurations, its variables and complex values, and what its
//! connection's pool drops when the session ends, however it ends. A
//! session crosses the C boundary once, in the phase handler's entry.

use core::ffi::c_void;
use core::mem::{align_of, size_of};
use core::ptr;

use nginx_sys::{
    ngx_log_t, ngx_module_t, ngx_palloc, ngx_pool_cleanup_add, ngx_str_t,
    ngx_stream_complex_value_t, ngx_stream_session_t, ngx_uint_t, ngx_variable_value_t,
};
use ngx::core::{Pool, Status};

use super::stream_weak::{rlw_stream_complex_value, rlw_stream_get_flushed_variable};
use super::vars;

/// A stream session, as the phase handler is given it.
#[repr(transparent)]
pub struct Session(ngx_stream_session_t);

impl Session {
    /// The session behind nginx's pointer.
    ///
    /// # Safety
    /// `s` is a live session nginx passed to a handler, not otherwise
    /// borrowed for `'a`.
    pub unsafe fn from_ptr<'a>(s: *mut ngx_stream_session_t) -> &'a mut Session {
        // SAFETY: per the contract; the wrapper is repr(transparent).
        unsafe { &mut *s.cast::<Session>() }
    }

    /// The session's connection's log.
    pub fn log(&self) -> *mut ngx_log_t {
        // SAFETY: a live session has its connection.
        unsafe { (*self.0.connection).log }
    }

    /// `module`'s server configuration for the session (None: unset).
    pub fn srv_conf<T>(&self, module: &ngx_module_t) -> Option<&'static T> {
        // SAFETY: srv_conf holds one entry per stream module, by
        // ctx_index, each the module's configuration of the cycle (which
        // outlives the session); T is what `module` allocated.
        unsafe {
            let conf = *self.0.srv_conf.add(module.ctx_index);
            conf.cast::<T>().as_ref()
        }
    }

    /// The session's value of the variable `index` (flushed: a
    /// non-cacheable one is evaluated again). Err(()): an nginx error.
    /// The bytes live in the connection's pool, as long as the session.
    pub fn variable<'s>(&mut self, index: ngx_uint_t) -> Result<&'s [u8], ()> {
        // SAFETY: the index was obtained at configuration time for the
        // stream block; the session is live.
        let v = unsafe { rlw_stream_get_flushed_variable(&mut self.0, index) };
        // SAFETY: a non-null result is the session's value, whose data
        // lives as long as the session.
        match unsafe { v.as_ref() } {
            None => Err(()),
            // SAFETY: as above.
            Some(v) => Ok(unsafe { vars::variable_bytes(v) }),
        }
    }

    /// `cv` evaluated for the session (connection pool memory, as long as
    /// the session). Err(()): an nginx error.
    pub fn complex_value<'s>(&mut self, cv: &ngx_stream_complex_value_t) -> Result<&'s [u8], ()> {
        let mut out = ngx_str_t::empty();
        let cv = ptr::from_ref(cv).cast_mut();
        // SAFETY: cv was compiled for the stream block, in the
        // configuration pool; nginx writes the value into `out`.
        let rc = unsafe { rlw_stream_complex_value(&mut self.0, cv, &mut out) };
        if rc != Status::NGX_OK.into() {
            return Err(());
        }
        if out.len == 0 || out.data.is_null() {
            return Ok(&[]);
        }
        // SAFETY: the value lives in the connection's pool.
        Ok(unsafe { core::slice::from_raw_parts(out.data, out.len) })
    }

    /// The session's context of `module` (what its handler kept), if set.
    pub fn ctx<T>(&self, module: &ngx_module_t) -> Option<&'static T> {
        // SAFETY: ctx holds one entry per stream module, by ctx_index,
        // null or what that module set (a T in the connection's pool, as
        // long as the session).
        unsafe { (*self.0.ctx.add(module.ctx_index)).cast::<T>().as_ref() }
    }

    /// Keeps `value` as the session's context of `module`, in the
    /// connection's pool (as long as the session; never dropped: plain
    /// data). None: out of memory.
    pub fn set_ctx<T: Copy>(&mut self, module: &ngx_module_t, value: T) -> Option<()> {
        const { assert!(align_of::<T>() <= align_of::<usize>()) };
        // SAFETY: the connection's pool is live; a non-null result has
        // room for a T (pool alignment), which ctx then points at.
        unsafe {
            let p = ngx_palloc((*self.0.connection).pool, size_of::<T>()).cast::<T>();
            if p.is_null() {
                return None;
            }
            p.write(value);
            *self.0.ctx.add(module.ctx_index) = p.cast();
        }
        Some(())
    }

    /// Sets the variable value `v` to a copy of `bytes` in the connection's
    /// pool. Err(()): out of memory.
    pub fn set_value(&self, v: &mut ngx_variable_value_t, bytes: &[u8]) -> Result<(), ()> {
        // SAFETY: the connection's pool is live for the session.
        let mut pool = unsafe { Pool::from_ngx_pool((*self.0.connection).pool) };
        let copy = super::pool::pool_copy(&mut pool, bytes).ok_or(())?;
        vars::set_found(v, copy.as_mut_ptr(), copy.len());
        Ok(())
    }

    /// Has `value` dropped when the session's connection pool is destroyed
    /// (the session ends, however: closed by either side, timed out, a
    /// UDP session's last response, a worker's exit). Err(value): out of
    /// memory, nothing registered.
    pub fn drop_at_end<T: 'static>(&mut self, value: T) -> Result<&'static mut T, T> {
        if align_of::<T>() > align_of::<usize>() {
            return Err(value);
        }
        // SAFETY: the connection and its pool are live; a non-null
        // cleanup entry has room for a T (pool alignment, checked above),
        // ours to fill, and runs its handler once when the pool is
        // destroyed, after which nothing refers to the T.
        unsafe {
            let pool = (*self.0.connection).pool;
            let Some(cln) = ngx_pool_cleanup_add(pool, size_of::<T>()).as_mut() else {
                return Err(value);
            };
            let data = cln.data.cast::<T>();
            data.write(value);
            cln.handler = Some(drop_data::<T>);
            Ok(&mut *data)
        }
    }
}

/// A pool cleanup's handler: drops the T written in its data.
unsafe extern "C" fn drop_data<T>(data: *mut c_void) {
    // SAFETY: `data` is the T `drop_at_end` wrote, dropped once here.
    unsafe { ptr::drop_in_place(data.cast::<T>()) }
}
