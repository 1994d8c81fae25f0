//! `redis_outage=share` and an invalid cost: the cost is the whole limit
//! in force, which during the outage is this gateway's share, never the
//! configured limit (that charged a client three times its share here and
//! left it nothing once Redis came back).

use super::*;

#[test]
fn an_invalid_cost_during_a_share_outage_charges_this_gateways_share() {
    // Limit 30, Redis out, 3 gateways seen: a share of 10.
    let zs: [ZoneCase; 1] = [(
        (60_000, false, 30, 0, false, 0),
        ((None, true), Outage::Share { gateways: 3 }),
    )];
    let mut run = start_at(&zs, T0);
    let key = run.zones[0].keys[0];
    let counted = |run: &Run| run.zones[0].table.peek(key, run.now).current;
    let mut q = run.asked(0, ([0; 3], [0; 3], [0; 3]), false, 0);
    q.costs[0] = Cost::Invalid;
    // Decided and checked against the model (admitted: 10 fits 10).
    run.request(q.clone(), None).unwrap();
    assert_eq!(counted(&run), 10, "charged the share, not the limit (30)");
    // Still out: nothing more fits the share.
    run.now += 1_000;
    q.costs[0] = Cost::Count(1);
    run.request(q.clone(), None).unwrap();
    assert_eq!(counted(&run), 10, "refused");
    // Redis is back: the client has the 20 of its 30 it did not use.
    run.zones[0].outage = Outage::None;
    for i in 0..21 {
        run.now += 100;
        run.request(q.clone(), None).unwrap();
        assert_eq!(
            counted(&run),
            (11 + i).min(30),
            "request {i} after the outage"
        );
    }
    // `closed`: an invalid cost is refused as every request needing the
    // fleet, and noted as invalid.
    run.zones[0].outage = Outage::Closed;
    let before = run.zones[0]
        .invalid
        .count
        .load(std::sync::atomic::Ordering::Relaxed);
    let mut q = run.asked(1, ([0; 3], [0; 3], [0; 3]), false, 0);
    q.costs[0] = Cost::Invalid;
    run.request(q, None).unwrap();
    assert_eq!(
        run.zones[0]
            .table
            .peek(run.zones[0].keys[1], run.now)
            .current,
        0
    );
    assert!(
        run.zones[0]
            .invalid
            .count
            .load(std::sync::atomic::Ordering::Relaxed)
            > before
    );
}
