//! Shared integration-test harness: runs the real nginx binary with the
//! module loaded, a real HTTP/1.1 upstream, and a tiny HTTP/1.1 client.
//!
//! Every test gets its own prefix directory and free ports, so tests run in
//! parallel. Binaries come from `make build` (target/dist) unless
//! `RLW_NGINX` / `RLW_MODULE` point elsewhere.
//!
//! One file per job, all re-exported here (`use common::*;`):
//! `conf` (binaries, nginx.conf fragments, `nginx -t`), `nginx` (the
//! process), `upstream`, `http` (the client), `load` (parallel requests),
//! `clock` (time, calendar, libfaketime), `prom` (metrics), and
//! `auth_server` (the `auth_request` backend of tests/it/auth.rs). `limits`
//! (the `conf` / `zone` / `start` / `key` helpers of tests/it/limits.rs,
//! tests/it/headers.rs and tests/it/directives.rs) is imported by name instead,
//! as other test files define their own `conf` / `start`.
#![allow(dead_code)]

pub mod auth_server;
mod clock;
mod conf;
pub mod fault_proxy;
mod http;
pub mod limits;
mod load;
mod nginx;
mod prom;
pub mod redis_servers;
pub mod scenarios;
pub mod status_upstream;
mod upstream;

// Each test binary uses a different part of the harness.
#[allow(unused_imports)]
pub use self::{clock::*, conf::*, http::*, load::*, nginx::*, prom::*, upstream::*};
