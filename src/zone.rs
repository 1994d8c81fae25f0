//! Shared-memory zones: the per-zone configuration, and the zone init
//! callback that formats a new zone or adopts the old one on reload.
//!
//! The table fills the whole zone: at init we take every free page of the
//! slab pool in one allocation and format it with the core's `Table::init`.
//! The slab pool's `data` pointer remembers where the table starts.

use core::ffi::c_void;
use core::ptr;

use nginx_sys::{
    ngx_http_complex_value_t, ngx_int_t, ngx_pagesize_shift, ngx_shm_zone_t, ngx_slab_alloc,
    ngx_slab_pool_t, ngx_str_t, ngx_uint_t, NGX_LOG_EMERG,
};
use ngx::core::Status;
use ngx::ngx_log_error;
use rate_limit_window_core::{FailPolicy, Table, Window, DEFAULT_WINDOW_MS};

/// One `rate_limit_window_zone`, allocated from the configuration pool.
pub struct ZoneConf {
    /// Zone name (configuration pool memory).
    pub name: ngx_str_t,
    /// False while the zone is only a forward reference from `rate_limit_window`.
    pub defined: bool,
    /// Where the zone was first referenced, for the "is not defined" error.
    pub ref_file: ngx_str_t,
    pub ref_line: ngx_uint_t,
    /// The compiled key, and its source text (compared on reload).
    pub key: ngx_http_complex_value_t,
    pub key_src: ngx_str_t,
    /// Window length; windows are aligned to the UTC epoch.
    pub window: Window,
    /// What happens when a new client cannot be tracked, or a limit
    /// variable holds garbage.
    pub fail: FailPolicy,
    /// Zone size in bytes, as configured.
    pub size: usize,
    pub shm_zone: *mut ngx_shm_zone_t,
    /// The slot table region inside the zone (set by `init_zone`).
    pub region: *mut u8,
    /// Length of `region` in bytes.
    pub region_len: usize,
    /// The table over `region`; None until the zone is initialised.
    pub table: Option<Table<'static>>,
}

impl ZoneConf {
    /// A zone known only by name so far.
    pub fn new(name: ngx_str_t, ref_file: ngx_str_t, ref_line: ngx_uint_t) -> Self {
        Self {
            name,
            defined: false,
            ref_file,
            ref_line,
            // SAFETY: an all-zero complex value is nginx's "unset" state.
            key: unsafe { core::mem::zeroed() },
            key_src: ngx_str_t::empty(),
            window: Window::from_ms(DEFAULT_WINDOW_MS).expect("default window is valid"),
            fail: FailPolicy::Open,
            size: 0,
            shm_zone: ptr::null_mut(),
            region: ptr::null_mut(),
            region_len: 0,
            table: None,
        }
    }

    /// Zone name for messages.
    pub fn name_str(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(self.name.as_bytes())
    }
}

/// A per-zone random seed for the keyed hash, so nobody can aim collisions
/// at a client.
fn random_seed() -> [u64; 2] {
    let mut buf = [0u8; 16];
    // SAFETY: getrandom writes at most buf.len() bytes into buf.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n != buf.len() as isize {
        // Fall back to something unpredictable enough from outside.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let addr = ptr::addr_of!(buf) as u64;
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() } as u64;
        buf[..8].copy_from_slice(&(t ^ addr.rotate_left(17)).to_le_bytes());
        buf[8..].copy_from_slice(
            &(pid.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ t.rotate_left(29)).to_le_bytes(),
        );
    }
    let (a, b) = buf.split_at(8);
    [
        u64::from_le_bytes(a.try_into().unwrap_or_default()),
        u64::from_le_bytes(b.try_into().unwrap_or_default()),
    ]
}

/// `ngx_shm_zone_t.init`: formats a new zone, or adopts the previous
/// cycle's table on reload (`data` is then the old cycle's ZoneConf).
pub unsafe extern "C" fn init_zone(shm_zone: *mut ngx_shm_zone_t, data: *mut c_void) -> ngx_int_t {
    // SAFETY: nginx passes the zone it created; data was set to our ZoneConf.
    let shm_zone = unsafe { &mut *shm_zone };
    // SAFETY: set_zone stored a pointer to a live, pool-allocated ZoneConf.
    let zone = unsafe { &mut *shm_zone.data.cast::<ZoneConf>() };
    let log = shm_zone.shm.log;

    if !data.is_null() {
        // SAFETY: the old cycle (and its ZoneConf) is alive during init.
        let old = unsafe { &*data.cast::<ZoneConf>() };
        if old.key_src.as_bytes() != zone.key_src.as_bytes() || old.window != zone.window {
            ngx_log_error!(
                NGX_LOG_EMERG,
                log,
                "rate_limit_window_zone \"{}\" is already bound to key \"{}\" with window={}ms; \
                 it cannot change to key \"{}\" with window={}ms on reload: use a new zone name",
                zone.name_str(),
                String::from_utf8_lossy(old.key_src.as_bytes()),
                old.window.ms(),
                String::from_utf8_lossy(zone.key_src.as_bytes()),
                zone.window.ms()
            );
            return Status::NGX_ERROR.into();
        }
        return adopt(zone, old.region, old.region_len, log);
    }

    let shpool = shm_zone.shm.addr.cast::<ngx_slab_pool_t>();
    if shm_zone.shm.exists != 0 {
        // A zone inherited from a previous binary (Windows only): the
        // slab pool's data pointer leads to the table.
        // SAFETY: the pool header sits at the start of the zone.
        let region = unsafe { (*shpool).data.cast::<u8>() };
        // SAFETY: as above.
        let len = unsafe { (*shpool).end.offset_from(region) } as usize;
        return adopt(zone, region, len, log);
    }

    // Take every free page of the slab pool for the table.
    // SAFETY: nginx initialised the slab pool over the zone before init.
    let mut pages = unsafe { (*shpool).pfree };
    let mut region: *mut u8 = ptr::null_mut();
    let mut len = 0usize;
    while pages > 0 {
        // SAFETY: ngx_pagesize_shift is set at startup.
        len = pages << unsafe { ngx_pagesize_shift };
        // SAFETY: a plain slab allocation; the pool is ours alone during init.
        region = unsafe { ngx_slab_alloc(shpool, len) }.cast();
        if !region.is_null() {
            break;
        }
        pages -= 1;
    }
    if region.is_null() {
        ngx_log_error!(
            NGX_LOG_EMERG,
            log,
            "rate_limit_window_zone \"{}\": no memory for the table",
            zone.name_str()
        );
        return Status::NGX_ERROR.into();
    }

    // SAFETY: region is `len` bytes of page-aligned zone memory, ours alone.
    match unsafe { Table::init(region, len, zone.window, random_seed()) } {
        Ok(t) => {
            // SAFETY: the pool header is ours during init.
            unsafe { (*shpool).data = region.cast() };
            zone.region = region;
            zone.region_len = len;
            zone.table = Some(t);
            Status::NGX_OK.into()
        }
        Err(e) => {
            ngx_log_error!(
                NGX_LOG_EMERG,
                log,
                "rate_limit_window_zone \"{}\": {}",
                zone.name_str(),
                e
            );
            Status::NGX_ERROR.into()
        }
    }
}

/// Adopts a table formatted by an earlier cycle, after validating its
/// header (magic, layout version, window).
fn adopt(
    zone: &mut ZoneConf,
    region: *mut u8,
    len: usize,
    log: *mut nginx_sys::ngx_log_t,
) -> ngx_int_t {
    // SAFETY: region/len describe the table an earlier init formatted in
    // this same zone, which nginx kept mapped.
    match unsafe { Table::attach(region, len, zone.window) } {
        Ok(t) => {
            zone.region = region;
            zone.region_len = len;
            zone.table = Some(t);
            Status::NGX_OK.into()
        }
        Err(e) => {
            ngx_log_error!(
                NGX_LOG_EMERG,
                log,
                "rate_limit_window_zone \"{}\": cannot reuse the zone: {}; restart nginx or use a new zone name",
                zone.name_str(),
                e
            );
            Status::NGX_ERROR.into()
        }
    }
}
