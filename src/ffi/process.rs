//! The process's side of nginx: the clock, this worker's shard, the
//! running cycle and its log, this process's timer events, and messages
//! that `nginx -t` shows on the terminal.

use core::cell::UnsafeCell;
use core::ptr;

use nginx_sys::{
    ngx_add_timer, ngx_cached_time, ngx_cycle, ngx_cycle_t, ngx_event_handler_pt, ngx_event_t,
    ngx_exiting, ngx_log_t, ngx_msec_t, ngx_pid, ngx_quit, ngx_terminate, ngx_uint_t, ngx_worker,
    NGX_LOG_NOTICE, NGX_LOG_WARN,
};

/// Current time as UTC unix epoch milliseconds, from nginx's cached clock
/// (updated once per event-loop iteration). The core never reads a clock
/// itself: this is the one place where time enters the module.
pub fn now_ms() -> u64 {
    // SAFETY: ngx_cached_time always points at a valid ngx_time_t slot once
    // nginx has started (ngx_time_init runs before any configuration).
    let tp = unsafe { &*ngx_cached_time };
    (tp.sec.max(0) as u64) * 1000 + tp.msec as u64
}

/// The counter shard of this worker process (the table takes it modulo its
/// shard count).
pub fn shard() -> usize {
    // SAFETY: ngx_worker is written once when the worker starts.
    unsafe { ngx_worker }
}

/// Whether this process is exiting or quitting (an old worker of a
/// reload, finishing its requests).
pub fn exiting() -> bool {
    // SAFETY: process-wide flags, written by the signal handler or the
    // event loop of this same process.
    unsafe { ngx_exiting != 0 || ngx_quit != 0 }
}

/// This process's pid: nginx's `ngx_pid` (set in each process it starts,
/// no system call), else getpid(2).
pub fn pid() -> u32 {
    // SAFETY: ngx_pid is written once when the process starts, before any
    // request or timer of it; getpid has no preconditions.
    unsafe {
        match ngx_pid {
            p if p > 0 => p as u32,
            _ => libc::getpid() as u32,
        }
    }
}

/// Whether process `pid` is alive (or a zombie not reaped yet) and one of
/// this nginx's: a signal 0 reaches it (or it exists under another user),
/// and its parent is this process's master (the pid was not taken again
/// by a process of someone else). False when no such process of ours
/// exists: the in-flight places and turns of a dead process are reclaimed.
pub fn alive(pid: u32) -> bool {
    let Ok(p) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if p <= 0 {
        return false;
    }
    // SAFETY: kill with signal 0 sends nothing; it only checks the pid.
    let rc = unsafe { libc::kill(p, 0) };
    if rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        return false;
    }
    ours(p)
}

/// Whether process `p` (alive) is this nginx's: the master's child (a
/// worker of any generation, the cache manager), the master, or this
/// process. True when /proc cannot tell.
fn ours(p: libc::pid_t) -> bool {
    // SAFETY: getpid and getppid have no preconditions.
    let (me, master) = unsafe { (libc::getpid(), libc::getppid()) };
    if p == me || p == master {
        return true;
    }
    let Ok(stat) = std::fs::read(format!("/proc/{p}/stat")) else {
        return true;
    };
    parent_in_stat(&stat).is_none_or(|parent| parent == master)
}

/// The parent pid in a `/proc/PID/stat` line: the 2nd field after the
/// command name, whose parentheses may hold anything.
fn parent_in_stat(stat: &[u8]) -> Option<libc::pid_t> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = core::str::from_utf8(&stat[close + 1..]).ok()?;
    rest.split_ascii_whitespace().nth(1)?.parse().ok()
}

/// nginx's running cycle (`ngx_cycle`), if one is set: while a
/// configuration loads, the cycle that runs now (the previous one).
pub fn cycle() -> Option<&'static ngx_cycle_t> {
    // SAFETY: ngx_cycle is null or points at the running cycle, which this
    // process's event loop thread (the only caller) keeps alive while it
    // runs, and a loading configuration until its cycle replaces it.
    unsafe { ngx_cycle.as_ref() }
}

/// The running cycle's log (null before there is one). Messages that must
/// not carry the request line (it may hold a key) go there.
pub fn cycle_log() -> *mut ngx_log_t {
    cycle().map_or(ptr::null_mut(), |c| c.log)
}

/// A timer event of this process (the sweep's, the state writer's): only
/// ever touched by the event loop thread, so it lives in a thread-local
/// (`thread_local! { static T: Timer = const { Timer::new() } }`), at an
/// address that stays put while nginx's timer tree holds it.
pub struct Timer(UnsafeCell<ngx_event_t>);

impl Timer {
    /// An idle event (all zero, as nginx allocates its own with ngx_pcalloc).
    pub const fn new() -> Self {
        // SAFETY: an all-zero ngx_event_t is a valid idle event.
        Timer(UnsafeCell::new(unsafe { core::mem::zeroed() }))
    }

    /// Arms the timer to call `handler` in `ms` ms, logging to `log`.
    pub fn arm(&self, handler: ngx_event_handler_pt, log: *mut ngx_log_t, ms: ngx_msec_t) {
        let ev = self.0.get();
        // SAFETY: the event is this thread's own (see `Timer`), not borrowed
        // elsewhere; nginx keeps a pointer to it in its timer tree, which
        // only this thread's event loop reads.
        unsafe {
            (*ev).handler = handler;
            (*ev).log = log;
            (*ev).set_cancelable(1);
            ngx_add_timer(ev, ms);
        }
    }

    /// Arms the timer again (from its handler) in `ms` ms, unless the
    /// process is exiting, quitting or terminating.
    pub fn rearm(&self, ms: ngx_msec_t) {
        // SAFETY: process-wide flags, written by the signal handler or the
        // event loop of this same process; the event is as in `arm`.
        unsafe {
            if ngx_exiting == 0 && ngx_quit == 0 && ngx_terminate == 0 {
                ngx_add_timer(self.0.get(), ms);
            }
        }
    }
}

/// Logs `text` at `level` to `log`, and during `nginx -t` (without `-q`)
/// writes it to the terminal too as `nginx: [notice] …`, whatever the
/// level the log takes: nginx itself shows the levels up to `warn` there
/// while it tests a configuration, not `notice` or `info`, which a stock
/// `error_log … error` does not even write. A log that writes to stderr
/// at that level shows it already.
pub fn log_and_show(level: ngx_uint_t, log: *mut ngx_log_t, text: &str) {
    ngx::ngx_log_error!(level, log, "{}", text);
    // SAFETY: process-wide flags nginx sets from its command line, before
    // any configuration is read.
    let (testing, quiet) = unsafe { (nginx_sys::ngx_test_config, nginx_sys::ngx_quiet_mode) };
    if testing == 0 || quiet != 0 || level <= NGX_LOG_WARN as ngx_uint_t || on_stderr(log, level) {
        return;
    }
    let tag = if level == NGX_LOG_NOTICE as ngx_uint_t {
        "notice"
    } else {
        "info"
    };
    let line = format!("nginx: [{tag}] {text}\n");
    // SAFETY: write(2) of our own buffer to the standard error descriptor.
    unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
}

/// Whether a log of the chain `log` writes messages of `level` to stderr.
fn on_stderr(mut log: *mut ngx_log_t, level: ngx_uint_t) -> bool {
    // SAFETY: `log` is null or nginx's log chain of the cycle, whose
    // entries and open files live as long as it.
    unsafe {
        while let Some(l) = log.as_ref() {
            if l.log_level >= level && l.file.as_ref().is_some_and(|f| f.fd == 2) {
                return true;
            }
            log = l.next;
        }
    }
    false
}
