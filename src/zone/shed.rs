//! A shed group's zone (`rate_limit_window_shed zone=NAME`): a small
//! shared-memory zone of its own, named `rate_limit_window_shed:NAME` (a
//! `:` no zone name of `rate_limit_window_zone` can hold), sized for the
//! group's `max=` (the core's `shm::shed::ShedGroup::bytes_for`), which
//! every location naming the group shares. Its init formats the group, or
//! adopts the previous cycle's on reload (the same size: a new `max=` takes
//! effect in it); a `max=` that changes the size is a new zone to nginx,
//! which counts the old group's requests in flight, each under its process.

use core::alloc::Layout;
use core::ffi::c_void;

use nginx_sys::{ngx_int_t, ngx_pagesize_shift, ngx_shm_zone_t, ngx_str_t, NGX_LOG_EMERG};
use ngx::allocator::Allocator;
use ngx::core::{SlabPool, Status};
use ngx::ngx_log_error;
use rate_limit_window_core::engine::shed::ShedLimits;
use rate_limit_window_core::shm::shed::ShedGroup;
use rate_limit_window_core::shm::Owner;

/// One shed group, allocated from the configuration pool.
pub struct ShedConf {
    /// The group's name (`zone=`, configuration pool memory).
    pub name: ngx_str_t,
    /// `max=` and `reserve=`, the same in every location of the group.
    pub limits: ShedLimits,
    /// The group in its zone (set by the zone's init).
    pub group: Option<ShedGroup<'static>>,
}

impl ShedConf {
    /// The group's name, for messages and labels.
    pub fn name_str(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(self.name.as_bytes())
    }

    /// This process's owner of the group's places (its pid).
    pub fn owner(&self) -> Option<Owner> {
        super::owner_for(&self.group.as_ref()?.places)
    }
}

/// The shared-memory zone name of the group `name`.
pub fn zone_name(name: &[u8]) -> Vec<u8> {
    let mut v = b"rate_limit_window_shed:".to_vec();
    v.extend_from_slice(name);
    v
}

/// `ngx_shm_zone_t.init` of a group's zone: adopts the previous cycle's
/// group when nginx hands over its memory (a reload, same size; a new
/// `max=` takes effect there), else formats the zone with all its free
/// pages and counts in it the places of the running cycle's group of the
/// same name, if any (a `max=` that changed the zone's size). The slab
/// pool's `data` keeps where the group is.
pub extern "C" fn init_zone(shm_zone: *mut ngx_shm_zone_t, data: *mut c_void) -> ngx_int_t {
    // SAFETY: nginx passes the zone it created, whose `data` the directive
    // set to our live, pool-allocated ShedConf; `data` is null or the old
    // cycle's ShedConf; the slab pool is ours alone until init returns.
    let (conf, reused, mut pool, log, end) = unsafe {
        let z = &mut *shm_zone;
        let Some(pool) = SlabPool::from_shm_zone(z) else {
            return Status::NGX_ERROR.into();
        };
        (
            &mut *z.data.cast::<ShedConf>(),
            !data.is_null(),
            pool,
            z.shm.log,
            z.shm.addr as usize + z.shm.size,
        )
    };
    let max = conf.limits.max;
    let group = if reused {
        let region = pool.as_ref().data.cast::<u8>();
        let len = end.saturating_sub(region as usize);
        // SAFETY: the region an earlier init formatted in this same zone,
        // `len` bytes to the zone's end at most, mapped for as long as the
        // zone; `attach` checks the group's own bytes within them.
        unsafe { ShedGroup::attach(region, len, max) }
            .inspect(|g| g.places.retire(None))
            .map_err(|e| {
                format!("cannot reuse the zone: {e}; restart nginx or use a new zone name")
            })
    } else {
        format_group(conf, &mut pool, max)
    };
    match group {
        Ok(g) => {
            conf.group = Some(g);
            Status::NGX_OK.into()
        }
        Err(why) => {
            ngx_log_error!(
                NGX_LOG_EMERG,
                log,
                "rate_limit_window_shed zone \"{}\": {}",
                conf.name_str(),
                why
            );
            Status::NGX_ERROR.into()
        }
    }
}

/// A new group's zone: every free page of the pool for the group (so that
/// a later `max=` of the same zone size fits it), then the places of the
/// running cycle's group of the same name carried over.
fn format_group(
    conf: &ShedConf,
    pool: &mut SlabPool,
    max: u32,
) -> Result<ShedGroup<'static>, String> {
    // SAFETY: ngx_pagesize_shift is set once at startup.
    let shift = unsafe { ngx_pagesize_shift };
    let need = ShedGroup::bytes_for(max);
    let mut pages = pool.as_ref().pfree;
    let mut region = (core::ptr::null_mut(), 0);
    while pages > 0 && (pages << shift) >= need {
        let len = pages << shift;
        if let Some(p) = Layout::from_size_align(len, 64)
            .ok()
            .and_then(|l| pool.allocate(l).ok())
        {
            region = (p.cast::<u8>().as_ptr(), len);
            break;
        }
        pages -= 1;
    }
    pool.as_mut().data = region.0.cast();
    // SAFETY: null (refused by init), or a fresh, page-aligned allocation
    // of `region.1` bytes of the zone, ours alone during init and mapped
    // for as long as the zone.
    let g = unsafe { ShedGroup::init(region.0, region.1, max) }
        .map_err(|_| String::from("no memory for the group"))?;
    if let Some(old) = previous(conf) {
        old.places.retire(Some(crate::ffi::process::now_ms()));
        g.places.carry_from(&old.places);
    }
    Ok(g)
}

/// The running cycle's group of the same name (a reload that changed its
/// zone's size), if any.
fn previous(conf: &ShedConf) -> Option<ShedGroup<'static>> {
    let cycle = crate::ffi::process::cycle()?;
    if cycle.conf_ctx.is_null() {
        return None;
    }
    let mcf = <crate::Module as ngx::http::HttpModuleMainConf>::main_conf(cycle)?;
    mcf.sheds()
        .filter(|g| !core::ptr::eq(*g, conf))
        .find(|g| g.name.as_bytes() == conf.name.as_bytes())
        .and_then(|g| g.group)
}
