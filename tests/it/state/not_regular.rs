//! `state=` at a path that is not a regular file (a FIFO: reading it would
//! hang the master), or named by two zones (each would overwrite the
//! other's state): refused by `nginx -t` at once, with an `[emerg]`.
use super::nginx_t::{emerg_of_nginx_t, stock_conf};

use std::time::{Duration, Instant};

#[test]
fn a_fifo_at_the_state_path_is_refused_by_nginx_t_within_a_second() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("z.state");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo(3) with a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let t = Instant::now();
    let (line, out) = emerg_of_nginx_t(dir.path(), &stock_conf(&fifo, "60s"));
    let took = t.elapsed();
    assert!(took < Duration::from_secs(1), "nginx -t took {took:?}");
    assert!(line.contains("is a FIFO, not a regular file"), "{out}");
    assert!(line.contains(fifo.to_str().unwrap()), "{out}");
}

#[test]
fn two_zones_naming_one_state_file_fail_nginx_t() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("shared.state");
    let conf = stock_conf(&state, "60s").replace(
        "\n}\n",
        &format!(
            "\n    rate_limit_window_zone $http_x_other zone=y:1m window=60s state={};\n}}\n",
            state.display()
        ),
    );
    let (line, out) = emerg_of_nginx_t(dir.path(), &conf);
    assert!(
        line.contains("rate_limit_window_zone \"y\": state file")
            && line.contains("is already zone \"z\"'s"),
        "{out}"
    );
}
