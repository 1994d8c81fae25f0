//! What `nginx -t` says on the terminal about `state=`: a directory the
//! workers cannot write is an [emerg] naming the path and the user, and
//! what a start would restore (or why it would ignore a file).
use super::*;

/// `nginx -t -p DIR -c DIR/nginx.conf` with `conf` written there first:
/// (success, what it wrote on the terminal).
pub(super) fn nginx_t_in(dir: &Path, conf: &str) -> (bool, String) {
    fs::create_dir_all(dir.join("logs")).unwrap();
    fs::write(dir.join("nginx.conf"), conf).unwrap();
    let out = std::process::Command::new(nginx_bin())
        .arg("-t")
        .arg("-p")
        .arg(dir)
        .arg("-c")
        .arg(dir.join("nginx.conf"))
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run nginx -t");
    let mut text = String::from_utf8_lossy(&out.stderr).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stdout));
    (out.status.success(), text)
}

/// A stock configuration of zone `z` (as [`Site`] has it, window
/// `window`) keeping its state in `state`: workers as `nobody` (with
/// Debian's group `nogroup`: `user nobody;` alone asks for a group
/// `nobody`, which Debian lacks), and `error_log … error`, which never
/// writes a notice.
pub(super) fn stock_conf(state: &Path, window: &str) -> String {
    format!(
        "load_module {};\nuser nobody nogroup;\nerror_log logs/error.log error;\npid logs/nginx.pid;\n\
         events {{}}\nhttp {{\n    rate_limit_window_zone $http_x_key zone=z:1m window={window} \
         state={};\n}}\n",
        module_so().display(),
        state.display()
    )
}

/// The `[emerg]` line `nginx -t` prints for `conf` in `dir` (it must
/// fail), and all it printed.
pub(super) fn emerg_of_nginx_t(dir: &Path, conf: &str) -> (String, String) {
    let (ok, out) = nginx_t_in(dir, conf);
    assert!(!ok, "{out}");
    let line = out
        .lines()
        .find(|l| l.contains("[emerg]"))
        .unwrap_or_else(|| panic!("{out}"))
        .to_string();
    (line, out)
}

/// A `state=` directory that is missing, or that `user nobody` cannot
/// write, is an `[emerg]` of `nginx -t` on the terminal, and of a start,
/// naming the path, the user and the fix; once it is theirs, `nginx -t`
/// passes and says on the terminal that there is no file yet.
#[test]
fn a_state_directory_the_workers_cannot_write_is_an_emerg_on_the_terminal() {
    let root = tempfile::tempdir().unwrap();
    fs::set_permissions(root.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let dir = root.path().join("state");
    let state = dir.join("z.state");
    let conf = stock_conf(&state, "1h");
    let (line, _) = emerg_of_nginx_t(root.path(), &conf);
    assert!(
        line.contains(&format!("\"{}\"", state.display()))
            && line.contains("does not exist")
            && line.contains("user \"nobody\"")
            && line.contains(&format!(
                "install -d -o nobody -g nogroup -m 0700 {}",
                dir.display()
            )),
        "{line}"
    );
    // The doc's own advice, 0700, but root's: nobody cannot write there.
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
    let (line, out) = emerg_of_nginx_t(root.path(), &conf);
    assert!(
        line.contains(&format!("state file \"{}\"", state.display()))
            && line.contains("the workers (user \"nobody\") cannot write")
            && line.contains("Permission denied")
            && line.contains(&format!("chown nobody:nogroup {}", dir.display())),
        "{line}"
    );
    assert!(out.contains("test failed"), "{out}");
    // A start says the same on the terminal and does not start.
    let start = std::process::Command::new(nginx_bin())
        .arg("-p")
        .arg(root.path())
        .arg("-c")
        .arg(root.path().join("nginx.conf"))
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run nginx");
    let said = String::from_utf8_lossy(&start.stderr);
    assert!(!start.status.success(), "{said}");
    assert!(
        said.contains("[emerg]") && said.contains("cannot write"),
        "{said}"
    );
    // Theirs: nginx -t passes, and says what it would do at start.
    let nobody = CString::new("nobody").unwrap();
    // SAFETY: getpwnam returns null or a static entry, read at once.
    let uid = unsafe { libc::getpwnam(nobody.as_ptr()).as_ref() }
        .map(|p| p.pw_uid)
        .unwrap();
    std::os::unix::fs::chown(&dir, Some(uid), None).unwrap();
    let (ok, out) = nginx_t_in(root.path(), &conf);
    assert!(ok && out.contains("test is successful"), "{out}");
    assert!(
        out.contains(&format!(
            "nginx: [notice] rate_limit_window_zone \"z\": no state file \"{}\" yet",
            state.display()
        )),
        "{out}"
    );
    // -q: only errors.
    fs::write(root.path().join("nginx.conf"), &conf).unwrap();
    let quiet = std::process::Command::new(nginx_bin())
        .args(["-q", "-t", "-p"])
        .arg(root.path())
        .arg("-c")
        .arg(root.path().join("nginx.conf"))
        .output()
        .unwrap();
    assert!(quiet.status.success());
    assert_eq!(String::from_utf8_lossy(&quiet.stderr), "");
}

/// `nginx -t` says on the terminal what it would restore, or why it would
/// ignore the file, with a stock `error_log … error`.
#[test]
fn nginx_t_says_on_the_terminal_what_it_would_restore() {
    let site = Site::new(None);
    let ng = site.start("window=1h", 5);
    clear_of_boundary(3_600_000, 60_000);
    send(&ng, "a", 3);
    shut(&ng, libc::SIGQUIT);
    drop(ng);
    let good = fs::read(site.state()).unwrap();
    let prefix = tempfile::tempdir().unwrap();
    let (ok, out) = nginx_t_in(prefix.path(), &stock_conf(&site.state(), "1h"));
    assert!(ok, "{out}");
    assert!(
        out.contains(&format!(
            "nginx: [notice] rate_limit_window_zone \"z\": would restore 1 live clients from \
             state file \"{}\" written ",
            site.state().display()
        )),
        "{out}"
    );
    assert!(
        !read_lossy(&prefix.path().join("logs/error.log")).contains("would restore"),
        "error_log … error keeps notices out of the file"
    );
    fs::write(site.state(), &good[..good.len() - 7]).unwrap();
    let (ok, out) = nginx_t_in(prefix.path(), &stock_conf(&site.state(), "1h"));
    assert!(ok, "{out}");
    assert!(
        out.contains("nginx: [error] rate_limit_window_zone \"z\": state file")
            && out.contains("ignored: the file is truncated"),
        "{out}"
    );
    fs::write(site.state(), &good).unwrap();
    let (ok, out) = nginx_t_in(prefix.path(), &stock_conf(&site.state(), "2h"));
    assert!(ok, "{out}");
    assert!(
        out.contains("[error]") && out.contains("ignored: written by another zone: window"),
        "{out}"
    );
    assert_eq!(
        fs::read(site.state()).unwrap(),
        good,
        "nginx -t wrote nothing"
    );
}
