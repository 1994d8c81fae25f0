//! The integration tests: one binary, one module per topic, over the
//! harness in `common/`. `cargo test --profile tests -p rate_limit_window_it -- <module>::`
//! runs one topic.

mod common;

mod alerts;
mod auth;
mod calendar;
mod charge;
mod clock;
mod cluster;
mod configs;
mod cost;
mod count_status;
mod debug_log;
mod delay;
mod deployment;
mod directives;
mod docs_truth;
mod emerg_texts;
mod examples;
mod fleet_chaos;
mod fleet_deadline;
mod fleet_edges;
mod fleet_kinds;
mod fleet_order;
mod fleet_outage;
mod fleet_sync;
mod foundation;
mod grpc;
mod harness;
mod headers;
mod headers_truth;
mod in_flight;
mod in_flight_linger;
mod limits;
mod linger_protocols;
mod metrics;
mod overrides;
mod phases;
mod ranges;
mod recipes;
mod redis_auth_tls;
mod redis_cluster;
mod redis_conf;
mod redis_engine;
mod redis_sentinel;
mod reliability;
mod rule;
mod shed;
mod soak;
mod state;
mod stream;
mod stream_checks;
mod stream_loading;
mod strict;
