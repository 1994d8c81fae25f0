//! Held requests take turns: one client's flood leaves places for
//! another's, wake-ups stay about one per admission, and the turns are
//! shared by every worker.
use super::*;

/// Issue 36's case: `limit=2` per 2 s, `delay=10s delay_max_held=20`, one
/// worker; 30 requests of one client at once. Its share is what can be
/// admitted within 10 s, so it cannot take every place.
fn flood_one_client(clock: &ShiftedClock, ng: &Nginx) -> Vec<Shot> {
    burst(clock, ng.port, "flood", 30)
}

fn fair_queue(clock: &ShiftedClock, up: &Upstream) -> Nginx {
    clock.builder().upstream_of(up).workers(1).start(&conf(
        "2s",
        "rate_limit_window zone=z limit=2 delay=10s delay_max_held=20;",
    ))
}

/// One client floods a delay location; another's third request, which
/// fits within 2 s, is held and admitted in time, not refused for want of
/// a place.
#[test]
fn one_client_flood_leaves_places_for_another() {
    let clock = ShiftedClock::new();
    let up = Upstream::start();
    let ng = fair_queue(&clock, &up);
    clock.jump_to_window_offset(2_000, 100);
    let port = ng.port;
    let flood = thread::spawn({
        let clock = clock.clone();
        move || burst(&clock, port, "flood", 30)
    });
    thread::sleep(Duration::from_millis(300));
    let polite = burst(&clock, ng.port, "polite", 3);
    let flood = flood.join().unwrap();
    let statuses: Vec<u16> = polite.iter().map(|s| s.status).collect();
    assert_eq!(statuses, [200, 200, 200], "{polite:#?}");
    let late: Vec<&Shot> = polite.iter().filter(|s| s.rlw == "DELAYED").collect();
    assert_eq!(late.len(), 1, "{polite:#?}");
    // Admitted when the window allows, within the 2 s it needs.
    assert!(late[0].done - late[0].sent <= 2_500, "{:?}", late[0]);
    let refused = flood.iter().filter(|s| s.status == 429).count();
    let held = flood.iter().filter(|s| s.rlw == "DELAYED").count();
    eprintln!("flood: {held} held then admitted, {refused} refused at once");
    // The flood's share: what 2 per 2 s admits within 10 s (about 10),
    // never all 20 places.
    assert!((5..=12).contains(&held), "held {held}: {flood:#?}");
    assert_eq!(share_full(ng.port), (30 - 2 - held) as f64);
    assert!(flood
        .iter()
        .filter(|s| s.status == 429)
        .all(|s| s.done - s.sent < 1_000));
}

/// Held requests of one client take turns: each wakes when its own turn
/// comes, not all at the same ms; holds logged per admission stay small.
#[test]
fn wake_ups_per_admission_are_bounded() {
    let clock = ShiftedClock::new();
    let up = Upstream::start();
    let ng = fair_queue(&clock, &up);
    clock.jump_to_window_offset(2_000, 100);
    let off = ng.error_log_len();
    let flood = flood_one_client(&clock, &ng);
    let admitted = flood.iter().filter(|s| s.rlw == "DELAYED").count();
    let holds = holds_since(&ng, off);
    eprintln!("{holds} holds for {admitted} admissions");
    assert!(admitted >= 5, "{flood:#?}");
    assert!(
        holds <= 2 * admitted,
        "{holds} holds for {admitted} admissions"
    );
    // In order: admitted at distinct moments, about W/limit apart.
    let mut done: Vec<u128> = flood
        .iter()
        .filter(|s| s.rlw == "DELAYED")
        .map(|s| s.done)
        .collect();
    done.sort();
    let bunched = done.windows(2).filter(|w| w[1] - w[0] < 100).count();
    assert!(bunched <= admitted / 2, "{done:?}");
}

/// `limit=10` per 1 s, `delay=2s`, 40 requests of one client at once on
/// 2 workers: the client's held requests take turns across both workers
/// (the zone's shared queue), so a request is held only when its turn
/// comes within the delay: none is held the whole delay and then refused.
#[test]
fn held_requests_take_turns_across_workers() {
    let clock = ShiftedClock::new();
    let up = Upstream::start();
    let ng = start_on(
        &clock,
        &up,
        &conf("1s", "rate_limit_window zone=z limit=10 delay=2s;"),
    );
    assert_eq!(ng.expected_workers(), 2);
    clock.jump_to_window_offset(1_000, 50);
    let shots = burst(&clock, ng.port, "crowd", 40);
    let admitted: Vec<&Shot> = shots.iter().filter(|s| s.status == 200).collect();
    let refused: Vec<&Shot> = shots.iter().filter(|s| s.status == 429).collect();
    assert_eq!(admitted.len() + refused.len(), 40, "{shots:#?}");
    for s in &refused {
        // Refused at once (its turn was past the delay), never after a hold.
        assert!(
            s.done - s.sent < 1_000,
            "held {} ms and then refused: {shots:#?}",
            s.done - s.sent
        );
        assert!(s.retry_after >= 1, "{s:?}");
    }
    // 10 at once, then as the window slides: about 10 more within 2 s.
    assert!(
        (18..=22).contains(&admitted.len()),
        "{} admitted: {shots:#?}",
        admitted.len()
    );
    assert_eq!(delayed(ng.port, "rejected"), 0.0, "held then rejected");
    assert_eq!(held(ng.port), 0.0);
}

/// Every client has a queue of its own: 1,000 clients at their limit, one
/// more request each, are all held (none refused as `share_full` because
/// of other clients' keys: the turns are counted per client, not in shared
/// buckets), while a second request of one of them is refused at once
/// (its share, what can be admitted within `delay=75s` of a 60 s window
/// at `limit=1` with 50 s of it left, is one held request: the first waits
/// for the next window, a second for the one after it; a queue shared with
/// any other client would have refused one of them).
#[test]
fn a_thousand_clients_are_all_held() {
    let clock = ShiftedClock::new();
    let up = Upstream::start();
    // A 2m zone: its turns count 2,146 held requests at once (1m: 1,072).
    let c = conf_with(
        "rate_limit_window_zone $http_x_key zone=z:2m window=60s;",
        "rate_limit_window zone=z limit=1 delay=75s delay_max_held=2000;",
    )
    .replace("worker_connections 1024;", "worker_connections 4096;");
    assert!(c.contains("worker_connections 4096;"));
    let ng = start_on(&clock, &up, &c);
    // 50 s clear of the window's end: the 2,000 requests below all fall in
    // one window on a loaded machine, and a second held request of a
    // client would wait over 75 s unless they took over 35 s.
    clock.clear_of_boundary(60_000, 50_000);
    let streams = one_held_each(ng.port, "many", 1000);
    assert!(
        wait_for(Duration::from_secs(30), || held(ng.port) == 1000.0),
        "held: {}, share_full: {}",
        held(ng.port),
        share_full(ng.port)
    );
    assert_eq!(share_full(ng.port), 0.0);
    let again = send_raw(ng.port, "many-0");
    assert_eq!(status_within(&again, Duration::from_secs(5)), Some(429));
    assert_eq!(share_full(ng.port), 1.0);
    assert_eq!(held(ng.port), 1000.0);
    drop(streams);
    assert!(wait_for(Duration::from_secs(10), || held(ng.port) == 0.0));
    assert_eq!(delayed(ng.port, "abandoned"), 1000.0);
}
