//! The location's side of `delay=`: `delay_max_held=` (merged like the
//! other location settings) and this worker's held requests (see
//! request/hold.rs, which holds the requests; each client's turns are the
//! zone's, shared by its workers: the core's `shm::Turns`).

use core::cell::Cell;

use nginx_sys::ngx_uint_t;
use rate_limit_window_core::conf::error::LimitConfError;
use rate_limit_window_core::rule::delay::DEFAULT_MAX_HELD;

/// `ngx_conf_t`'s "unset" marker for `ngx_uint_t`.
const UNSET_UINT: ngx_uint_t = ngx_uint_t::MAX;

/// The location's side of `delay=`: the cap and this worker's count.
pub struct LocDelay {
    /// `delay_max_held=`: requests held at once in this location, per
    /// worker (UNSET until merged).
    pub max_held: ngx_uint_t,
    /// Requests this worker holds now in this location.
    pub(crate) held: Cell<ngx_uint_t>,
}

impl Default for LocDelay {
    fn default() -> Self {
        Self {
            max_held: UNSET_UINT,
            held: Cell::new(0),
        }
    }
}

impl LocDelay {
    /// Inherits `delay_max_held` from the level above, else the default.
    pub fn merge(&mut self, prev: &LocDelay) {
        if self.max_held == UNSET_UINT {
            self.max_held = if prev.max_held == UNSET_UINT {
                DEFAULT_MAX_HELD as ngx_uint_t
            } else {
                prev.max_held
            };
        }
    }

    /// Sets `delay_max_held` from a directive; Err if another directive of
    /// the same level set another value.
    pub fn set_max_held(&mut self, n: u32) -> Result<(), LimitConfError> {
        let wanted = n as ngx_uint_t;
        if self.max_held != UNSET_UINT && self.max_held != wanted {
            let already = self.max_held as u64;
            return Err(LimitConfError::ConflictingMaxHeld { n, already });
        }
        self.max_held = wanted;
        Ok(())
    }
}
