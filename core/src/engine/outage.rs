//! `redis_outage=`: what a limit of a `redis=` zone enforces while the
//! zone's Redis is out. Decided here, per request, from two facts the host
//! reads off the zone (is its sync failing, how many gateways did it see
//! in the last minute), so that every policy is one rule, property-tested
//! against the fleet's bound.

use crate::conf::redis_url::OutagePolicy;

/// What is in force for a limit now ([`in_force`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Outage {
    /// The limit as configured (Redis is up, or `redis_outage=local`, or
    /// no `redis=`).
    #[default]
    None,
    /// This gateway's share of the limit: the limit divided by the
    /// gateways seen (at least 1 request).
    Share {
        /// Gateways seen in the last minute, this one included (1 at least).
        gateways: u32,
    },
    /// Requests that need the fleet are refused.
    Closed,
}

/// What `policy` puts in force: `down` says whether the zone's sync is
/// failing now, `gateways` how many gateways it saw in the last minute
/// (this one included; 0 read as 1).
#[inline]
pub fn in_force(policy: OutagePolicy, down: bool, gateways: u64) -> Outage {
    if !down {
        return Outage::None;
    }
    match policy {
        OutagePolicy::Local => Outage::None,
        OutagePolicy::Share => Outage::Share {
            gateways: u32::try_from(gateways.max(1)).unwrap_or(u32::MAX),
        },
        OutagePolicy::Closed => Outage::Closed,
    }
}

impl Outage {
    /// The limit in force for a configured (or overridden) `limit`
    /// (requests per window); None: refuse the request (`closed`). A share
    /// is rounded down, 1 request at least for a limit above 0: `n`
    /// gateways admit at most `max(limit, n)` together.
    #[inline]
    pub fn limit(self, limit: u32) -> Option<u32> {
        match self {
            Outage::None => Some(limit),
            Outage::Share { gateways } => Some(if limit == 0 {
                0
            } else {
                (limit / gateways.max(1)).max(1)
            }),
            Outage::Closed => None,
        }
    }

    /// The name of what is in force (metrics, logs).
    pub fn name(self) -> &'static str {
        match self {
            Outage::None => "none",
            Outage::Share { .. } => "share",
            Outage::Closed => "closed",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn each_policy_in_and_out_of_an_outage() {
        for p in OutagePolicy::ALL {
            assert_eq!(in_force(p, false, 3), Outage::None);
        }
        assert_eq!(in_force(OutagePolicy::Local, true, 3), Outage::None);
        assert_eq!(in_force(OutagePolicy::Closed, true, 3).limit(100), None);
        let share = in_force(OutagePolicy::Share, true, 3);
        assert_eq!(share.limit(100), Some(33));
        assert_eq!(share.limit(2), Some(1));
        assert_eq!(share.limit(0), Some(0));
        assert_eq!(in_force(OutagePolicy::Share, true, 0).limit(7), Some(7));
    }

    proptest! {
        /// `share`: the fleet (the gateways seen) admits at most the limit
        /// together (or one request each when there are more gateways than
        /// the limit), and each gateway at least one request; `closed`
        /// refuses; `local`, or Redis up, changes nothing.
        #[test]
        fn share_keeps_the_fleet_within_the_limit(
            limit in 0u32..5_000,
            gateways in 0u64..200,
            down: bool,
        ) {
            let share = in_force(OutagePolicy::Share, down, gateways).limit(limit).unwrap();
            let n = gateways.max(1);
            if down {
                prop_assert!(u64::from(share) * n <= u64::from(limit).max(n));
                prop_assert!(share >= 1 || limit == 0);
                // No share is smaller than it has to be.
                prop_assert!(u64::from(share + 1) * n > u64::from(limit) || share == 0);
            } else {
                prop_assert_eq!(share, limit);
            }
            prop_assert_eq!(in_force(OutagePolicy::Local, down, gateways).limit(limit), Some(limit));
            let closed = in_force(OutagePolicy::Closed, down, gateways).limit(limit);
            prop_assert_eq!(closed, (!down).then_some(limit));
        }
    }
}
