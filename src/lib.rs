//! `ngx_http_rate_limit_window_module` and `ngx_stream_rate_limit_window_module`:
//! sliding-window rate limiting for nginx's http and stream proxies.
//!
//! This file holds only the module statics and the `HttpModule` glue. The
//! algorithm and the shared-memory table live in the pure crate
//! `rate_limit_window_core`; each nginx-facing job has a folder of its own,
//! each importing only the folders below it in this table:
//!
//! | folder / file | job                                                    |
//! |---------------|--------------------------------------------------------|
//! | `commands.rs` | the directive table and the configuration entries      |
//! | `api/`        | the metrics page, `write=on`'s reset and overrides API |
//! | `stream/`     | the stream module: directives, PREACCESS handler, variables |
//! | `request/`    | the request path: phases, handler, record, `delay=`, settle, filter, variables |
//! | `conf/`       | configuration structs, merge, the zone directive       |
//! | `worker/`     | worker 0's timers: the sweep, the state writer         |
//! | `sync/`       | cluster sync through Redis (`redis=` zones)            |
//! | `zone/`       | the shared zone: init, reuse on reload, resize, state file |
//! | `ffi/`        | nginx's structures behind safe calls: request, conf, headers, variables, clock |

#![allow(clippy::missing_safety_doc)]

mod api;
mod commands;
mod conf;
mod ffi;
mod request;
mod stream;
mod sync;
mod worker;
mod zone;

use core::ptr;

use nginx_sys::{
    ngx_conf_t, ngx_cycle_t, ngx_http_module_t, ngx_int_t, ngx_module_t, ngx_process,
    ngx_stream_module_t, ngx_uint_t, ngx_worker, NGX_HTTP_MODULE, NGX_PROCESS_SINGLE,
    NGX_PROCESS_WORKER, NGX_STREAM_MODULE,
};
use ngx::core::Status;
use ngx::http::{HttpModule, HttpModuleLocationConf, HttpModuleMainConf};

/// The module type that carries the `HttpModule` callbacks.
pub(crate) struct Module;

impl HttpModule for Module {
    fn module() -> &'static ngx_module_t {
        // SAFETY: the module static is initialised at load time and only
        // mutated by nginx itself (ctx_index, index) before workers start.
        unsafe { &*ptr::addr_of!(ngx_http_rate_limit_window_module) }
    }
}

/// A registration step of pre- or postconfiguration.
type Step = unsafe fn(*mut ngx_conf_t) -> ngx_int_t;

/// Runs `steps` in order on `cf`, up to the first that fails.
fn run_steps(cf: *mut ngx_conf_t, steps: &[Step]) -> ngx_int_t {
    for step in steps {
        // SAFETY: each step registers variables or handlers, and only needs
        // the configuration nginx passes to pre- or postconfiguration, which
        // is `cf` (see the callers).
        let rc = unsafe { step(cf) };
        if rc != Status::NGX_OK.into() {
            return Status::NGX_ERROR.into();
        }
    }
    Status::NGX_OK.into()
}

/// Preconfiguration: the module's variables.
extern "C" fn preconfiguration(cf: *mut ngx_conf_t) -> ngx_int_t {
    run_steps(cf, &[request::variables::register])
}

/// Postconfiguration: the phase handlers, the LOG-phase handler of
/// `charge=`, the header filter and the body filter of in-flight places.
extern "C" fn postconfiguration(cf: *mut ngx_conf_t) -> ngx_int_t {
    let rc = run_steps(
        cf,
        &[request::phases::register, request::charge_read::register],
    );
    if rc == Status::NGX_OK.into() {
        request::filter::register();
        request::done::register();
    }
    rc
}

// SAFETY: MainConf is what create_main_conf allocates for this module.
unsafe impl HttpModuleMainConf for Module {
    type MainConf = conf::MainConf;
}

// SAFETY: LocationConf is what create_loc_conf allocates for this module.
unsafe impl HttpModuleLocationConf for Module {
    type LocationConf = conf::LocConf;
}

static NGX_HTTP_RATE_LIMIT_WINDOW_MODULE_CTX: ngx_http_module_t = ngx_http_module_t {
    preconfiguration: Some(preconfiguration),
    postconfiguration: Some(postconfiguration),
    create_main_conf: Some(Module::create_main_conf),
    init_main_conf: Some(commands::init_main_conf),
    create_srv_conf: None,
    merge_srv_conf: None,
    create_loc_conf: Some(Module::create_loc_conf),
    merge_loc_conf: Some(commands::merge_loc_conf),
};

// Generate the `ngx_modules` table: required for a loadable cdylib built
// outside nginx's own build system.
// The `ngx_modules` table of a loadable module built outside nginx's own
// build system: both modules of the .so, http's and the stream's. A stream
// module must load after `ngx_stream_module` (Debian's nginx loads it from
// a module of its own: docs/stream.md).
#[cfg(feature = "export-modules")]
mod exports {
    use core::ffi::c_char;
    use core::ptr;
    use nginx_sys::ngx_module_t;

    #[no_mangle]
    #[allow(non_upper_case_globals)]
    pub static mut ngx_modules: [*const ngx_module_t; 3] = [
        ptr::addr_of!(crate::ngx_http_rate_limit_window_module),
        ptr::addr_of!(crate::ngx_stream_rate_limit_window_module),
        ptr::null(),
    ];

    #[no_mangle]
    #[allow(non_upper_case_globals)]
    pub static mut ngx_module_names: [*const c_char; 3] = [
        c"ngx_http_rate_limit_window_module".as_ptr(),
        c"ngx_stream_rate_limit_window_module".as_ptr(),
        ptr::null(),
    ];

    #[no_mangle]
    #[allow(non_upper_case_globals)]
    pub static mut ngx_module_order: [*const c_char; 1] = [ptr::null()];
}

/// The module descriptor nginx loads.
#[used]
#[allow(non_upper_case_globals)]
#[cfg_attr(not(feature = "export-modules"), no_mangle)]
pub static mut ngx_http_rate_limit_window_module: ngx_module_t = ngx_module_t {
    ctx: ptr::addr_of!(NGX_HTTP_RATE_LIMIT_WINDOW_MODULE_CTX) as _,
    commands: ptr::addr_of_mut!(commands::COMMANDS).cast(),
    type_: NGX_HTTP_MODULE as ngx_uint_t,
    init_module: Some(init_module),
    init_process: Some(init_process),
    exit_process: Some(exit_process),
    ..ngx_module_t::default()
};

static NGX_STREAM_RATE_LIMIT_WINDOW_MODULE_CTX: ngx_stream_module_t = ngx_stream_module_t {
    preconfiguration: Some(stream::variables::register),
    postconfiguration: Some(stream::postconfiguration),
    create_main_conf: Some(stream::conf::create_main_conf),
    init_main_conf: Some(stream::conf::init_main_conf),
    create_srv_conf: Some(stream::conf::create_srv_conf),
    merge_srv_conf: Some(stream::conf::merge_srv_conf),
};

/// The stream module's descriptor (`stream {}`: stream/), beside the
/// http one in the same .so. Its zones' places, sync threads, sweep and
/// state files are run by the http module's process callbacks, over every
/// zone of the cycle (`zone::all_of`).
#[used]
#[allow(non_upper_case_globals)]
#[cfg_attr(not(feature = "export-modules"), no_mangle)]
pub static mut ngx_stream_rate_limit_window_module: ngx_module_t = ngx_module_t {
    ctx: ptr::addr_of!(NGX_STREAM_RATE_LIMIT_WINDOW_MODULE_CTX) as _,
    commands: ptr::addr_of_mut!(stream::commands::COMMANDS).cast(),
    type_: NGX_STREAM_MODULE as ngx_uint_t,
    ..ngx_module_t::default()
};

/// The stream module's descriptor, for its indexes.
pub(crate) fn stream_module() -> &'static ngx_module_t {
    // SAFETY: the static is only changed by nginx (its indexes), before
    // the configuration that reads them is parsed.
    unsafe { &*ptr::addr_of!(ngx_stream_rate_limit_window_module) }
}

/// Configuration load. In single-process mode (`master_process off`) a
/// reload loads the new configuration in the same process and
/// `init_process` does not run again: join the sync threads, which point
/// into the old configuration (alive until after this call), and start new
/// ones on the new cycle's zones.
extern "C" fn init_module(cycle: *mut ngx_cycle_t) -> ngx_int_t {
    // SAFETY: nginx passes the cycle being initialised; its old_cycle is
    // null or the running one (the bare init cycle at startup, with no
    // conf_ctx); ngx_process is a process-wide variable set at startup.
    let (cycle, reload, process) = unsafe {
        let cycle = &*cycle;
        let old = cycle.old_cycle.as_ref();
        (
            cycle,
            old.is_some_and(|o| !o.conf_ctx.is_null()),
            ngx_process,
        )
    };
    if let Some(mcf) = Module::main_conf(cycle) {
        zone::resolve_header_keys(cycle, &mcf.zones);
        conf::shed::resolve_priority_headers(cycle, &mcf.shed_priorities);
    }
    if reload && process == NGX_PROCESS_SINGLE as ngx_uint_t {
        sync::stop_all();
        worker::state_write::join(cycle.log);
        sync::start_all(&zone::all_of(cycle));
    }
    Status::NGX_OK.into()
}

/// Worker start: worker 0 (or the single process) runs the Redis sync
/// threads, one per Redis-backed zone, and the sweep of stale slots. nginx
/// respawns worker 0 with them.
extern "C" fn init_process(cycle: *mut ngx_cycle_t) -> ngx_int_t {
    // SAFETY: ngx_process and ngx_worker are set before init_process runs;
    // nginx passes the running cycle.
    let (process, worker, cycle) = unsafe { (ngx_process, ngx_worker, &*cycle) };
    // Every zone of the cycle, http's and the stream's.
    let zones = zone::all_of(cycle);
    let mcf = Module::main_conf(cycle);
    // The in-flight places, turns and held requests of every process
    // gone (a respawn follows its predecessor's death), and any under
    // this pid (a process gone whose pid this one took again): owned by
    // pid, never by a worker's number, so that the cache manager and
    // loader, and old workers of a reload, keep theirs.
    zone::stop_places(zone::each(&zones), mcf.into_iter().flat_map(|m| m.sheds()));
    zone::reclaim_places(zone::each(&zones), mcf.into_iter().flat_map(|m| m.sheds()));
    let ours = (process == NGX_PROCESS_WORKER as ngx_uint_t && worker == 0)
        || process == NGX_PROCESS_SINGLE as ngx_uint_t;
    if !ours {
        return Status::NGX_OK.into();
    }
    sync::start_all(&zones);
    let sheds = mcf.is_some_and(|m| !m.sheds.is_empty());
    worker::sweep::start(cycle, !zones.is_empty() || sheds);
    let every_ms = mcf
        .and_then(|m| m.state_interval_ms)
        .unwrap_or(conf::STATE_INTERVAL_MS);
    worker::state_write::start(cycle, &zones, every_ms);
    Status::NGX_OK.into()
}

/// Worker exit (quit, reload, shutdown): stop and join the sync threads,
/// then write the zones' state files.
extern "C" fn exit_process(cycle: *mut ngx_cycle_t) {
    sync::stop_all();
    // SAFETY: nginx passes the running cycle.
    if let Some(cycle) = unsafe { cycle.as_ref() } {
        let zones = zone::all_of(cycle);
        let mcf = Module::main_conf(cycle);
        zone::stop_places(zone::each(&zones), mcf.into_iter().flat_map(|m| m.sheds()));
    }
    worker::state_write::save_at_exit(cycle);
}
