//! The request path: where the handler sits in the phases ([`phases`]),
//! the phase handler that asks the engine and acts on its verdict
//! ([`handler`], over the engine's host in [`judging`], with its log lines
//! in [`logging`], a zone's key read in [`key`], `cost=` read in [`cost`]
//! and bans shared and logged in [`ban`]), the record kept across redirects ([`record`]), `delay=`'s
//! timers ([`hold`]), the answer to a gRPC call ([`grpc_reject`]), what is
//! settled when the request ends (`count_status=` in [`count_status`],
//! `charge=` read in [`charge_read`]), the header filter ([`filter`]), the
//! body filter that gives in-flight places back when the response is
//! complete ([`done`]), the
//! `near_limit_total` counter ([`near_limit`]), the tally of requests
//! decided ([`tally`]) and the variables ([`variables`]).

pub mod ban;
pub mod charge_read;
pub mod cost;
pub mod count_status;
pub mod done;
pub mod filter;
pub mod grpc_reject;
pub mod handler;
pub mod hold;
pub mod in_flight;
pub mod judging;
pub mod key;
pub mod logging;
pub mod near_limit;
pub mod phases;
pub mod record;
pub mod shed;
pub mod tally;
pub mod variables;
