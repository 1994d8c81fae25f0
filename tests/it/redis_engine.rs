//! The engine the fleet tests run against is the one asked for
//! (`make test ENGINE=valkey`: Valkey; `make test`: Redis), and its
//! version is printed (`--nocapture` shows it; the Makefile prints it too).
use crate::common;

use common::redis_servers::{cli, cli_bin, engine, sentinel_bin, server_bin, RedisProc};
use common::*;
use std::process::Command;

/// `INFO server`'s field `name`, if the reply has it.
fn info_field(info: &str, name: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{name}:")))
        .map(str::to_owned)
}

/// The first line `program --version` prints.
fn version_line(program: &str) -> String {
    let out = Command::new(program)
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("{program} not found ({e})"));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or("")
        .to_owned()
}

#[test]
fn the_servers_are_the_engine_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let conf = format!("bind 127.0.0.1\nport {port}\nsave \"\"\nappendonly no\n");
    let _server = RedisProc::spawn(&server_bin(), dir.path(), "engine", &conf, port);
    let info = cli(&["-p", &port.to_string(), "INFO", "server"]);
    let valkey = info_field(&info, "valkey_version");
    let redis = info_field(&info, "redis_version");
    eprintln!(
        "engine {}: {} ({}); server INFO valkey_version={valkey:?} redis_version={redis:?}",
        engine(),
        version_line(&server_bin()),
        version_line(&cli_bin()),
    );
    match engine() {
        "valkey" => {
            let v = valkey.unwrap_or_else(|| panic!("not a Valkey server:\n{info}"));
            let major: u32 = v.split('.').next().unwrap().parse().unwrap();
            assert!(major >= 8, "Valkey {v}: the tested engine is 8 or later");
            assert!(version_line(&cli_bin()).starts_with("valkey-cli 8"));
            assert!(version_line(&sentinel_bin()).contains("Valkey server v=8"));
        }
        _ => {
            assert_eq!(valkey, None, "a Valkey server where Redis was asked for");
            assert!(redis.is_some(), "not a Redis server:\n{info}");
            assert!(version_line(&sentinel_bin()).starts_with("Redis server v="));
        }
    }
}
