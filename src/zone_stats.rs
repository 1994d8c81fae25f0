//! The zone header's counters of held requests (`delay=`): the core's
//! shared-memory type (`rate_limit_window_core::shm`), named here for the
//! feature that writes them.

pub use rate_limit_window_core::shm::DelayStats;
