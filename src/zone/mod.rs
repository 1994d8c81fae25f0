//! Shared-memory zones, the nginx side: the per-zone configuration
//! (`ZoneConf`) and how it reaches the zone header in the zone. The
//! header, the zone's layout and its one version are the core's
//! (`rate_limit_window_core::shm`); the zone init callback that formats a
//! new zone or adopts the old one on reload is in [`init`].
//!
//! Here: the zone's init and reuse on reload ([`init`]), a resized zone's
//! clients carried over ([`resize`]), a shed group's own zone ([`shed`]),
//! its state file read at init ([`state_file`]) after a check that the
//! workers can write it ([`state_dir`]); beside the zones, the module's
//! tally of requests decided ([`tally`]).

pub mod client;
pub mod init;
pub mod resize;
pub mod shed;
pub mod state_dir;
pub mod state_file;
pub mod tally;

use core::ptr;

use nginx_sys::{
    ngx_cycle_t, ngx_http_complex_value_t, ngx_shm_zone_t, ngx_str_t, ngx_stream_complex_value_t,
    ngx_uint_t,
};
use ngx::http::{HttpModuleMainConf, NgxHttpCoreModule};
use rate_limit_window_core::conf::error::ZoneIdentity;
use rate_limit_window_core::conf::parse::RedisParams;
use rate_limit_window_core::overrides::{Overrides, DEFAULT_OVERRIDES};
use rate_limit_window_core::rule::mode::Mode;
pub use rate_limit_window_core::shm::ZoneHeader;

use crate::ffi::header_in;
use rate_limit_window_core::shm::{Owner, Places, Turns};
use rate_limit_window_core::{FailPolicy, Table, Window, DEFAULT_WINDOW_MS};

/// The block a zone is declared in: `http {}` or `stream {}` (its key's
/// variables are that block's; its name is unique across both).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Context {
    Http,
    Stream,
}

impl Context {
    /// The block's name, as in the configuration and the metrics' label.
    pub fn as_str(self) -> &'static str {
        match self {
            Context::Http => "http",
            Context::Stream => "stream",
        }
    }
}

/// One `rate_limit_window_zone`, allocated from the configuration pool.
pub struct ZoneConf {
    /// Zone name (configuration pool memory).
    pub name: ngx_str_t,
    /// The block it is declared (or referenced) in.
    pub context: Context,
    /// False while the zone is only a forward reference from `rate_limit_window`.
    pub defined: bool,
    /// Where the zone was first referenced, for the "is not defined" error.
    pub ref_file: ngx_str_t,
    pub ref_line: ngx_uint_t,
    /// The compiled key, and its source text (compared on reload).
    pub key: ngx_http_complex_value_t,
    /// A stream zone's compiled key (`key` is unused there).
    pub stream_key: ngx_stream_complex_value_t,
    pub key_src: ngx_str_t,
    /// The variable's index when the key is exactly one variable (the usual
    /// `$binary_remote_addr`): read directly, without the script engine
    /// (an index of the zone's block's variables).
    pub key_index: Option<ngx_uint_t>,
    /// The header's name (after `http_`, as nginx compares it) when that
    /// variable is nginx's generic request-header one, `$http_NAME`: read
    /// by the module itself (ffi/header_in.rs). Set at `init_module`, once
    /// nginx has resolved the variables.
    pub key_header: Option<header_in::HeaderName>,
    /// `ipv6_prefix=` (bits, 32..=128; 128: whole addresses): IPv6 keys of
    /// a `$binary_remote_addr` zone are masked to it.
    pub ipv6_prefix: u8,
    /// Window length; windows are aligned to the UTC epoch.
    pub window: Window,
    /// The `window=` value as written (empty: the default), for messages.
    pub window_src: Vec<u8>,
    /// The rule (`mode=`): the sliding estimate or the strict window.
    pub mode: Mode,
    /// What happens when a new client cannot be tracked, or a limit
    /// variable holds garbage.
    pub fail: FailPolicy,
    /// Zone size in bytes, as configured.
    pub size: usize,
    /// Cluster sync through Redis (`redis=`), if configured.
    pub redis: Option<RedisParams>,
    /// The state file (`state=`, absolute), if configured (see state_file.rs).
    pub state: Option<std::path::PathBuf>,
    /// The cycle the zone is configured in (its core `user`, for the state
    /// file's check at init: state_dir.rs).
    pub cycle: *mut nginx_sys::ngx_cycle_t,
    pub shm_zone: *mut ngx_shm_zone_t,
    /// The zone header (set by `init_zone`): where the table is, plus the
    /// cluster-sync state shared by all workers.
    pub header: *mut ZoneHeader,
    /// The slot table inside the zone; None until the zone is initialised.
    pub table: Option<Table<'static>>,
    /// Where a `rate_limit_window` first gave the zone a `charge=` (file,
    /// line), for the refusal of a strict zone (conf/charge_var.rs).
    pub charge_at: Option<(ngx_str_t, ngx_uint_t)>,
    /// Where a `rate_limit_window` first gave the zone a `delay=` (file,
    /// line), for the refusal of a calendar zone (conf/calendar.rs).
    pub delay_at: Option<(ngx_str_t, ngx_uint_t)>,
    /// The largest fixed `limit=` above what a strict zone can count, and
    /// where it was given (conf/strict_limit.rs).
    pub big_limit_at: Option<(u32, (ngx_str_t, ngx_uint_t))>,
    /// `overrides=`: most per-client overrides (see the core's `overrides`).
    pub overrides_cap: usize,
    /// The override table inside the zone; None until it is initialised.
    pub overrides: Option<Overrides<'static>>,
    /// `delay=`'s queue turns, shared by the workers (set at init).
    pub turns: Option<Turns<'static>>,
    /// `in_flight=`'s places, shared by the workers (set at init).
    pub places: Option<Places<'static>>,
}

/// The zones of `stream {}` (the stream module's main configuration).
#[derive(Default)]
pub struct ZoneList {
    /// Zones in declaration/reference order (configuration pool, for the
    /// cycle).
    pub zones: Vec<*mut ZoneConf>,
}

/// Every zone of `cycle`: http's, then the stream's (one name space:
/// nginx refuses a shared zone's name declared for another use).
pub fn all_of(cycle: &ngx_cycle_t) -> Vec<*mut ZoneConf> {
    let mut zones = crate::Module::main_conf(cycle).map_or_else(Vec::new, |m| m.zones.clone());
    let stream = crate::ffi::stream_conf::cycle_main_conf(cycle, crate::stream_module());
    // SAFETY: a non-null main configuration of the stream module is the
    // ZoneList its create_main_conf allocated, for the cycle.
    if let Some(list) = unsafe { stream.cast::<ZoneList>().as_ref() } {
        zones.extend_from_slice(&list.zones);
    }
    zones
}

/// The zone called `name` of the running cycle, in either block.
pub fn by_name(name: &[u8]) -> Option<&'static ZoneConf> {
    let zones = running();
    let found = each(&zones).find(|z| z.name.as_bytes() == name);
    found
}

/// Every zone of the running cycle ([`all_of`]; none before one runs).
pub fn running() -> Vec<*mut ZoneConf> {
    crate::ffi::process::cycle().map_or_else(Vec::new, all_of)
}

/// The zones of a configuration's list (`MainConf::zones`, raw pointers
/// into the configuration pool), as references for the cycle.
pub fn each(zones: &[*mut ZoneConf]) -> impl Iterator<Item = &'static ZoneConf> + '_ {
    // SAFETY: zone pointers come from the configuration pool and stay
    // valid (and unchanged after configuration) for the cycle, longer than
    // any use of this list's zones by the process's timers and threads.
    zones.iter().map(|&z| unsafe { &*z })
}

/// After nginx resolved the configuration's variables (`init_module`):
/// notes each zone whose key is one generic request header, `$http_NAME`,
/// read on the request path by the module itself (see
/// [`header_in`](crate::ffi::header_in)).
pub fn resolve_header_keys(cycle: &ngx_cycle_t, zones: &[*mut ZoneConf]) {
    let Some(cmcf) = NgxHttpCoreModule::main_conf(cycle) else {
        return;
    };
    for &z in zones {
        // SAFETY: zone pointers come from the configuration pool; nothing
        // reads them concurrently while the master initialises modules.
        let zone = unsafe { &mut *z };
        zone.key_header = zone.key_index.and_then(|index| {
            // SAFETY: the core module's main configuration, its variables
            // resolved (init_module runs after the http block); the index
            // is one nginx gave for this configuration.
            let name = unsafe { header_in::generic_header_name(cmcf, index) }?;
            // SAFETY: the name is configuration memory, as long as the zone.
            let name = unsafe { core::slice::from_raw_parts(name.data.cast_const(), name.len) };
            Some(header_in::HeaderName::new(name))
        });
    }
}

/// The key of a zone keyed by the client's address (`addr=` lookups,
/// `ipv6_prefix=`).
pub const BINARY_REMOTE_ADDR: &[u8] = b"$binary_remote_addr";

impl ZoneConf {
    /// A zone of `context` known only by name so far.
    pub fn new(
        name: ngx_str_t,
        context: Context,
        ref_file: ngx_str_t,
        ref_line: ngx_uint_t,
    ) -> Self {
        Self {
            name,
            context,
            defined: false,
            ref_file,
            ref_line,
            // All zero: nginx's "unset" complex value.
            key: ngx_http_complex_value_t {
                value: ngx_str_t::empty(),
                flushes: ptr::null_mut(),
                lengths: ptr::null_mut(),
                values: ptr::null_mut(),
                u: nginx_sys::ngx_http_complex_value_t__bindgen_ty_1 { size: 0 },
            },
            stream_key: ngx_stream_complex_value_t {
                value: ngx_str_t::empty(),
                flushes: ptr::null_mut(),
                lengths: ptr::null_mut(),
                values: ptr::null_mut(),
                u: nginx_sys::ngx_stream_complex_value_t__bindgen_ty_1 { size: 0 },
            },
            key_src: ngx_str_t::empty(),
            key_index: None,
            key_header: None,
            ipv6_prefix: rate_limit_window_core::conf::addr::IPV6_PREFIX_MAX,
            window: Window::from_ms(DEFAULT_WINDOW_MS).expect("default window is valid"),
            window_src: Vec::new(),
            mode: Mode::Estimate,
            fail: FailPolicy::Open,
            size: 0,
            shm_zone: ptr::null_mut(),
            redis: None,
            state: None,
            cycle: ptr::null_mut(),
            header: ptr::null_mut(),
            table: None,
            charge_at: None,
            delay_at: None,
            big_limit_at: None,
            overrides_cap: DEFAULT_OVERRIDES,
            overrides: None,
            turns: None,
            places: None,
        }
    }

    /// This process's owner of the zone's places and turns (None: the
    /// zone has no places).
    pub fn places_owner(&self) -> Option<Owner> {
        owner_for(self.places.as_ref()?)
    }

    /// The key and window, as compared on reload.
    pub fn identity(&self) -> ZoneIdentity<'_> {
        ZoneIdentity {
            key: self.key_src.as_bytes(),
            window_ms: self.window.ms(),
            window_src: &self.window_src,
        }
    }

    /// Zone name for messages.
    pub fn name_str(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(self.name.as_bytes())
    }

    /// The zone header, once the zone is initialised.
    pub fn header(&self) -> Option<&ZoneHeader> {
        // SAFETY: `header` is null or points at the header `init_zone` or
        // `adopt` found in the zone, mapped for as long as this cycle.
        unsafe { self.header.as_ref() }
    }

    /// The table and the header of an initialised zone.
    pub fn live(&self) -> Option<(&Table<'static>, &ZoneHeader)> {
        Some((self.table.as_ref()?, self.header()?))
    }
}

/// This process's owner of places and turns: its pid (nothing to take or
/// run out of; see the core's `shm::Places`). None only on a system whose
/// pids do not fit (above Linux's limit of 2^22).
pub fn this_owner() -> Option<Owner> {
    Owner::of(crate::ffi::process::pid())
}

/// This process's owner of `places`: its pid and, when a resize retired
/// them, whether it is exiting and its clock (`Places::retire`).
pub fn owner_for(places: &Places<'_>) -> Option<Owner> {
    let o = this_owner()?;
    if !places.retired() {
        return Some(o);
    }
    let o = o.at(crate::ffi::process::now_ms());
    Some(if crate::ffi::process::exiting() {
        o.leaving()
    } else {
        o
    })
}

/// A process starting, and worker 0's sweep each second: takes back the
/// in-flight places, `delay=` turns and held requests of every process
/// that is gone, in every zone and shed group (see the core's
/// `shm::Places` and `shm::Turns`).
pub fn reclaim_places<'a>(
    zones: impl Iterator<Item = &'a ZoneConf>,
    sheds: impl Iterator<Item = &'a shed::ShedConf>,
) {
    let alive = crate::ffi::process::alive;
    for z in zones {
        if let Some(p) = z.places.as_ref() {
            p.reclaim_dead(alive);
        }
        if let Some(t) = z.turns.as_ref() {
            t.reclaim_dead(alive);
        }
    }
    for g in sheds.filter_map(|g| g.group.as_ref()) {
        g.places.reclaim_dead(alive);
    }
}

/// A process exiting: gives back what it still holds of every zone's and
/// shed group's places and turns.
pub fn stop_places<'a>(
    zones: impl Iterator<Item = &'a ZoneConf>,
    sheds: impl Iterator<Item = &'a shed::ShedConf>,
) {
    let Some(me) = this_owner() else {
        return;
    };
    for z in zones {
        if let Some(p) = z.places.as_ref() {
            p.stop(me);
        }
        if let Some(t) = z.turns.as_ref() {
            t.stop(me);
        }
    }
    for g in sheds.filter_map(|g| g.group.as_ref()) {
        g.places.stop(me);
    }
}
