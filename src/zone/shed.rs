//! A shed group's zone (`rate_limit_window_shed zone=NAME`): a small
//! shared-memory zone of its own, named `rate_limit_window_shed:NAME` (a
//! `:` no zone name of `rate_limit_window_zone` can hold), sized for the
//! group's `max=` (the core's `shm::shed::ShedGroup::bytes_for`), which
//! every location naming the group shares. Its init formats the group, or
//! adopts the previous cycle's on reload when `max=` is unchanged (a
//! changed `max=` is another size, so a new zone to nginx: its requests in
//! flight then start from 0).

use core::alloc::Layout;
use core::ffi::c_void;

use nginx_sys::{ngx_int_t, ngx_shm_zone_t, ngx_str_t, NGX_LOG_EMERG};
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
        self.group.as_ref().and(super::this_owner())
    }
}

/// The shared-memory zone name of the group `name`.
pub fn zone_name(name: &[u8]) -> Vec<u8> {
    let mut v = b"rate_limit_window_shed:".to_vec();
    v.extend_from_slice(name);
    v
}

/// `ngx_shm_zone_t.init` of a group's zone: adopts the previous cycle's
/// group when nginx hands over its memory (a reload, same size), else
/// formats the zone. The slab pool's `data` keeps where the group is.
pub extern "C" fn init_zone(shm_zone: *mut ngx_shm_zone_t, data: *mut c_void) -> ngx_int_t {
    // SAFETY: nginx passes the zone it created, whose `data` the directive
    // set to our live, pool-allocated ShedConf; `data` is null or the old
    // cycle's ShedConf; the slab pool is ours alone until init returns.
    let (conf, reused, mut pool, log) = unsafe {
        let z = &mut *shm_zone;
        let Some(pool) = SlabPool::from_shm_zone(z) else {
            return Status::NGX_ERROR.into();
        };
        (
            &mut *z.data.cast::<ShedConf>(),
            !data.is_null(),
            pool,
            z.shm.log,
        )
    };
    let max = conf.limits.max;
    let len = ShedGroup::bytes_for(max);
    let group = if reused {
        let region = pool.as_ref().data.cast::<u8>();
        // SAFETY: the region an earlier init formatted in this same zone
        // (`len` bytes for an unchanged max=, which `attach` checks),
        // mapped for as long as the zone.
        unsafe { ShedGroup::attach(region, len, max) }.map_err(|e| {
            format!("cannot reuse the zone: {e}; restart nginx or use a new zone name")
        })
    } else {
        let region = Layout::from_size_align(len, 64)
            .ok()
            .and_then(|l| pool.allocate(l).ok())
            .map_or(core::ptr::null_mut(), |p| p.cast::<u8>().as_ptr());
        pool.as_mut().data = region.cast();
        // SAFETY: a fresh, 64-byte aligned allocation of `len` bytes of the
        // zone (page-aligned: larger than half a page), ours alone during
        // init and mapped for as long as the zone.
        unsafe { ShedGroup::init(region, len, max) }
            .map_err(|_| String::from("no memory for the group"))
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
