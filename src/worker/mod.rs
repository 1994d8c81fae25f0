//! What worker 0 (or the single process) runs beside the requests, on its
//! own timers: the sweep of idle slots, which also logs the sync's outages
//! and owners ([`sweep`]), and the state files' writer ([`state_write`]).
//! The sync threads it starts are `sync`'s.

pub mod state_write;
pub mod sweep;
