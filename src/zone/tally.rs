//! The module's tally (`rate_limit_window_core::shm::tally`): one shared
//! memory segment of its own, `rate_limit_window tally` (a name no
//! `rate_limit_window_zone` can take: a zone name has no space), for the
//! counters that count each request once, and per route (`name=`).
//!
//! Registered after http{} is parsed when some zone is declared
//! ([`register`]); formatted by the master when nginx creates the segment,
//! or found again on a reload, when nginx hands the new cycle the same
//! memory ([`init_tally`]). Its routes are bound to slots then, by name, so
//! that a reload keeps each route's counts.

use core::alloc::Layout;
use core::ffi::c_void;
use core::ptr;

use nginx_sys::{ngx_conf_t, ngx_int_t, ngx_pagesize, ngx_shared_memory_add, ngx_shm_zone_t};
use nginx_sys::{ngx_str_t, NGX_LOG_EMERG};
use ngx::allocator::Allocator;
use ngx::core::{SlabPool, Status};
use ngx::ngx_log_error;
use rate_limit_window_core::conf::value_error::LimitConfError;
use rate_limit_window_core::shm::tally::{route_id, Tally, MAX_ROUTES};

/// The segment's name.
const NAME: &str = "rate_limit_window tally";

/// The tally of a configuration (in its MainConf, pool memory that never
/// moves): the route names and, once the segment's init has run, the
/// tally and each route's slot in it.
#[derive(Default)]
pub struct TallyConf {
    /// Route names of `name=`, in the order first met: a limit's `route`
    /// indexes them (at most [`MAX_ROUTES`]).
    pub routes: Vec<Vec<u8>>,
    /// The tally's slot of each route.
    pub slots: Vec<usize>,
    /// The tally (None before its init, or without any zone).
    pub tally: Option<&'static Tally>,
}

impl TallyConf {
    /// The index of route `name` (`name=`), added when new; Err beyond
    /// [`MAX_ROUTES`] names.
    pub fn route(&mut self, name: &[u8]) -> Result<u8, LimitConfError> {
        if let Some(i) = self.routes.iter().position(|n| n == name) {
            return Ok(i as u8);
        }
        if self.routes.len() >= MAX_ROUTES {
            return Err(LimitConfError::TooManyRoutes(name.to_vec()));
        }
        self.routes.push(name.to_vec());
        Ok((self.routes.len() - 1) as u8)
    }

    /// The tally slot of route `index` (a limit's `route`).
    pub fn slot(&self, index: u8) -> usize {
        self.slots
            .get(usize::from(index))
            .copied()
            .unwrap_or(usize::MAX)
    }
}

/// Registers the tally's segment for the cycle being configured; its init
/// fills `conf.tally` and `conf.slots`. Err: nginx refused it (logged).
pub fn register(cf: &mut ngx_conf_t, conf: &mut TallyConf) -> Result<(), ()> {
    // SAFETY: ngx_pagesize is set by nginx at startup, before parsing.
    let page = unsafe { ngx_pagesize };
    // The slab pool's own pages, then the tally (a page-aligned run).
    let size = Tally::BYTES.next_multiple_of(page) + 8 * page;
    let mut name = ngx_str_t {
        len: NAME.len(),
        data: NAME.as_ptr().cast_mut(),
    };
    let module = ptr::addr_of_mut!(crate::ngx_http_rate_limit_window_module);
    // SAFETY: registers (or finds) the segment in the cycle being
    // configured; nginx copies nothing of `name` but keeps its pointer,
    // which is static.
    let shm = unsafe { ngx_shared_memory_add(cf, &mut name, size, module.cast()) };
    // SAFETY: a non-null shm is a zone descriptor owned by the cycle.
    let shm = unsafe { shm.as_mut() }.ok_or(())?;
    shm.init = Some(init_tally);
    shm.data = ptr::from_mut(conf).cast();
    Ok(())
}

/// `ngx_shm_zone_t.init` of the tally: formats it in a new segment, or
/// attaches to the one a previous cycle formatted (a reload hands over the
/// same memory), then binds the configuration's routes to slots.
extern "C" fn init_tally(shm_zone: *mut ngx_shm_zone_t, _old: *mut c_void) -> ngx_int_t {
    // SAFETY: nginx passes the segment `register` added, whose data is the
    // cycle's TallyConf (in its MainConf, pool memory alive for the
    // cycle); nginx formatted the slab pool over the segment, ours alone
    // during init.
    let (conf, pool, log) = unsafe {
        let z = &*shm_zone;
        (
            &mut *z.data.cast::<TallyConf>(),
            SlabPool::from_shm_zone(z),
            z.shm.log,
        )
    };
    let Some(mut pool) = pool else {
        return Status::NGX_ERROR.into();
    };
    let found = pool.as_ref().data.cast::<u8>().cast_const();
    let tally = if found.is_null() {
        None
    } else {
        // SAFETY: a non-null pool data pointer is the tally an earlier init
        // allocated in this segment, Tally::BYTES long and mapped as long
        // as the segment; attach checks its stamp.
        unsafe { Tally::attach(found, Tally::BYTES) }
    };
    let tally = match tally {
        Some(t) => t,
        None => match format(&mut pool) {
            Some(t) => t,
            None => {
                ngx_log_error!(
                    NGX_LOG_EMERG,
                    log,
                    "rate_limit_window: no memory for the tally of requests"
                );
                return Status::NGX_ERROR.into();
            }
        },
    };
    let ids: Vec<u64> = conf.routes.iter().map(|n| route_id(n)).collect();
    conf.slots = tally.bind(&ids);
    conf.tally = Some(tally);
    Status::NGX_OK.into()
}

/// A fresh tally from the segment's slab pool, noted in its data pointer.
fn format(pool: &mut SlabPool) -> Option<&'static Tally> {
    let layout = Layout::from_size_align(Tally::BYTES, 64).ok()?;
    let p = pool.allocate(layout).ok()?.cast::<u8>().as_ptr();
    // SAFETY: a fresh slab allocation of Tally::BYTES (a page-aligned run of
    // pages), mapped for as long as the segment and ours alone during init.
    let t = unsafe { Tally::init(p, Tally::BYTES) }.ok()?;
    pool.as_mut().data = p.cast();
    Some(t)
}
