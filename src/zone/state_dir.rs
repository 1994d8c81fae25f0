//! `state=FILE`: whether the workers will be able to write FILE, checked
//! when nginx starts, reloads or tests the configuration (`nginx -t`), so
//! that a wrong directory is an `[emerg]` on the terminal, naming the
//! path, the user and the fix, instead of an `error` in the log ten
//! seconds after a start that looked fine (see docs/state-file.md, "When it
//! is checked", for why a start fails for it).
//!
//! The workers write FILE (worker 0 every interval, every worker at exit)
//! as the user they run as: nginx's core `user` when the master runs as
//! root (`nobody` when `user` is not given), else the master's own user.
//! A write creates `FILE.tmp` and `FILE.lock` in FILE's directory and
//! renames over FILE, so that user needs write and search permission on
//! the directory (and search permission on every directory above it), and
//! read and write on `FILE.lock` if one is left. A root master checks that
//! as the workers' user exactly (ACLs, read-only mounts and the directories
//! above included): a child process takes that user's ids and asks
//! `access(2)`; nothing is written.

use std::ffi::{CStr, CString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nginx_sys::{ngx_core_conf_t, ngx_cycle_t};

/// The user the workers run as.
pub struct WorkerUser {
    pub uid: libc::uid_t,
    pub gid: libc::gid_t,
    /// The user's name (its number when it has none).
    pub name: String,
    /// The group's name (its number when it has none).
    pub group: String,
    /// The user's groups (set by nginx's `initgroups`), the workers' too.
    groups: Vec<libc::gid_t>,
    /// The master is root, so the workers change to this user: check as
    /// them in a child process. False: they are this process's user.
    switch: bool,
}

/// Why the workers could not write the state file.
#[derive(Debug, PartialEq, Eq)]
pub enum Problem {
    /// The directory does not exist.
    Missing,
    /// The path's directory part names something else than a directory.
    NotDir,
    /// `access(2)` as the workers' user refused the directory.
    Dir(io::ErrorKind, String),
    /// A leftover `FILE.lock` that user cannot open for writing.
    Lock(String),
    /// FILE is there and is not a regular file (a FIFO, a device, a
    /// directory, a symbolic link): what it is.
    NotRegular(&'static str),
}

/// What a file type is, for messages.
fn type_name(t: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_fifo() {
        "a FIFO"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// Reads the state file at `path`, never waiting on it: opened with
/// `O_NONBLOCK | O_NOFOLLOW` (a FIFO with no writer, or a symbolic link,
/// never hangs or redirects the read), refused unless `fstat` says it is
/// a regular file of at most `cap` bytes.
pub fn read_regular(path: &Path, cap: u64) -> io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    let m = f.metadata()?;
    if !m.file_type().is_file() {
        let what = type_name(m.file_type());
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("it is {what}, not a regular file"),
        ));
    }
    if m.len() > cap {
        let text = format!("it has {} bytes, more than {cap}", m.len());
        return Err(io::Error::new(io::ErrorKind::InvalidData, text));
    }
    let mut bytes = Vec::with_capacity(m.len() as usize);
    f.by_ref().take(cap + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("it grew past {cap} bytes"),
        ));
    }
    Ok(bytes)
}

/// nginx's core configuration of `cycle` (where `user` is).
fn core_conf(cycle: *const ngx_cycle_t) -> Option<&'static ngx_core_conf_t> {
    // SAFETY: `cycle` is the cycle being configured (its conf_ctx is
    // complete once the core modules' init_conf ran, before any zone's
    // init), alive during init; ngx_core_module.index is set at startup.
    unsafe {
        let ctx = (*cycle).conf_ctx;
        if ctx.is_null() {
            return None;
        }
        let conf = *ctx.add(nginx_sys::ngx_core_module.index);
        conf.cast::<ngx_core_conf_t>().cast_const().as_ref()
    }
}

/// The user the workers of `cycle` will run as.
pub fn worker_user(cycle: *const ngx_cycle_t) -> WorkerUser {
    // SAFETY: geteuid and getegid cannot fail.
    let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let unset = libc::uid_t::MAX;
    let (uid, gid, switch) = match core_conf(cycle) {
        // nginx switches only from root, to `user` (default nobody).
        Some(c) if euid == 0 && c.user != unset => (c.user, c.group, true),
        _ => (euid, egid, false),
    };
    let name = user_name(uid);
    let groups = if switch {
        groups_of(&name, gid)
    } else {
        vec![]
    };
    WorkerUser {
        uid,
        gid,
        group: group_name(gid),
        name,
        groups,
        switch,
    }
}

/// The name of user `uid` (its number without one).
fn user_name(uid: libc::uid_t) -> String {
    // SAFETY: getpwuid returns null or a static entry, read at once (the
    // master is single-threaded while it loads a configuration).
    let pw = unsafe { libc::getpwuid(uid) };
    if pw.is_null() {
        return uid.to_string();
    }
    // SAFETY: a non-null entry's pw_name is a NUL-terminated string.
    unsafe { CStr::from_ptr((*pw).pw_name) }
        .to_string_lossy()
        .into_owned()
}

/// The name of group `gid` (its number without one).
fn group_name(gid: libc::gid_t) -> String {
    // SAFETY: as in user_name, for the group database.
    let gr = unsafe { libc::getgrgid(gid) };
    if gr.is_null() {
        return gid.to_string();
    }
    // SAFETY: a non-null entry's gr_name is a NUL-terminated string.
    unsafe { CStr::from_ptr((*gr).gr_name) }
        .to_string_lossy()
        .into_owned()
}

/// The groups nginx's `initgroups(user, gid)` gives the workers.
fn groups_of(user: &str, gid: libc::gid_t) -> Vec<libc::gid_t> {
    let Ok(name) = CString::new(user) else {
        return vec![gid];
    };
    let mut n: libc::c_int = 64;
    loop {
        let mut groups = vec![0 as libc::gid_t; n as usize];
        let want = n;
        // SAFETY: `groups` has room for `n` entries; getgrouplist writes at
        // most that many and sets `n` to how many there are.
        let rc = unsafe { libc::getgrouplist(name.as_ptr(), gid, groups.as_mut_ptr(), &mut n) };
        if rc >= 0 {
            groups.truncate(n as usize);
            return groups;
        }
        if n <= want {
            return vec![gid];
        }
    }
}

/// Checks that the workers of `user` can write the state file `path`,
/// and that `path`, if there, is a regular file.
/// Ok(()) when they can, or when it cannot be told (a probe that could
/// not run: the workers' own write reports then).
pub fn check(path: &Path, user: &WorkerUser) -> Result<(), Problem> {
    // Never opened here: a FIFO would block `nginx -t`.
    if let Ok(m) = std::fs::symlink_metadata(path) {
        if !m.file_type().is_file() {
            return Err(Problem::NotRegular(type_name(m.file_type())));
        }
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("/"),
    };
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(Problem::NotDir),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(Problem::Missing),
        Err(_) => {}
    }
    if let Some(e) = access_as(user, dir, libc::W_OK | libc::X_OK) {
        return Err(Problem::Dir(e.kind(), os_text(&e)));
    }
    let mut lock = path.as_os_str().to_owned();
    lock.push(".lock");
    let lock = Path::new(&lock);
    if lock.exists() {
        if let Some(e) = access_as(user, lock, libc::R_OK | libc::W_OK) {
            return Err(Problem::Lock(os_text(&e)));
        }
    }
    Ok(())
}

/// The system's text of `e`, without Rust's "(os error N)".
fn os_text(e: &io::Error) -> String {
    let t = e.to_string();
    match t.find(" (os error") {
        Some(at) => t[..at].to_string(),
        None => t,
    }
}

/// `access(path, mode)` as the workers' user: the error it gives, None
/// when it allows it (or the probe could not run).
fn access_as(user: &WorkerUser, path: &Path, mode: libc::c_int) -> Option<io::Error> {
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    if !user.switch {
        // SAFETY: a NUL-terminated path; faccessat only reads it.
        let rc = unsafe { libc::faccessat(libc::AT_FDCWD, c.as_ptr(), mode, libc::AT_EACCESS) };
        return (rc != 0).then(io::Error::last_os_error);
    }
    probe(user, &c, mode)
}

/// Exit status of a probe whose switch of user failed.
const NO_SWITCH: i32 = 255;

/// A child process that becomes the workers' user and asks `access(2)`:
/// it exits with 0 or the errno. Only async-signal-safe calls in the
/// child (everything it needs is prepared before the fork).
fn probe(user: &WorkerUser, path: &CStr, mode: libc::c_int) -> Option<io::Error> {
    // SAFETY: fork(2); the child below calls only async-signal-safe
    // functions on memory prepared before the fork, then _exit(2).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return None;
    }
    if pid == 0 {
        // SAFETY: the child: setgroups, setgid, setuid, access and _exit
        // are system calls on values prepared by the parent.
        unsafe {
            if libc::setgroups(user.groups.len(), user.groups.as_ptr()) != 0
                || libc::setgid(user.gid) != 0
                || libc::setuid(user.uid) != 0
            {
                libc::_exit(NO_SWITCH);
            }
            let rc = libc::access(path.as_ptr(), mode);
            libc::_exit(if rc == 0 {
                0
            } else {
                *libc::__errno_location()
            });
        }
    }
    let mut status = 0;
    loop {
        // SAFETY: waits for the child forked above.
        let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
        if rc == pid {
            break;
        }
        if rc < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            // Reaped by someone else (a SIGCHLD handler): not told.
            return None;
        }
    }
    if !libc::WIFEXITED(status) {
        return None;
    }
    match libc::WEXITSTATUS(status) {
        0 | NO_SWITCH => None,
        errno => Some(io::Error::from_raw_os_error(errno)),
    }
}

/// The `[emerg]` text for `problem` with state file `path` of zone `zone`.
pub fn message(zone: &str, path: &Path, user: &WorkerUser, problem: &Problem) -> String {
    let dir = path.parent().unwrap_or(Path::new("/")).display();
    let (u, g) = (&user.name, &user.group);
    let fix_dir = format!("install -d -o {u} -g {g} -m 0700 {dir}");
    match problem {
        Problem::Missing => format!(
            "rate_limit_window_zone \"{zone}\": the directory of state file \"{}\" does not \
             exist; the workers (user \"{u}\") write the file there: create it, e.g. {fix_dir}",
            path.display()
        ),
        Problem::NotDir => format!(
            "rate_limit_window_zone \"{zone}\": the directory of state file \"{}\" is not a \
             directory: give state= a path in a directory that user \"{u}\" can write",
            path.display()
        ),
        Problem::Dir(_, why) => format!(
            "rate_limit_window_zone \"{zone}\": the workers (user \"{u}\") cannot write state \
             file \"{}\" in directory \"{dir}\" ({why}): make it theirs, e.g. chown {u}:{g} \
             {dir} && chmod 0700 {dir}, and let them through the directories above it",
            path.display()
        ),
        Problem::NotRegular(what) => format!(
            "rate_limit_window_zone \"{zone}\": state file \"{}\" is {what}, not a regular \
             file: give state= the path of a file (or of none yet) that only nginx writes",
            path.display()
        ),
        Problem::Lock(why) => format!(
            "rate_limit_window_zone \"{zone}\": the workers (user \"{u}\") cannot open the lock \
             file \"{}.lock\" of state file \"{}\" ({why}): remove it or chown it to {u}",
            path.display(),
            path.display()
        ),
    }
}
