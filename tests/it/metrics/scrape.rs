//! What a scrape costs: no more with a larger zone, whose slots in use the
//! sweep counts.
use super::*;

/// CPU time (user + system, in clock ticks of 10 ms) of the processes `pids`.
fn cpu_ticks(pids: &[i32]) -> u64 {
    pids.iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/stat")).ok())
        .map(|s| {
            // Fields after the command name, which ends with ')'.
            let rest = &s[s.rfind(')').map_or(0, |i| i + 2)..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            f[11].parse::<u64>().unwrap_or(0) + f[12].parse::<u64>().unwrap_or(0)
        })
        .sum()
}

/// Worker CPU ticks and wall time (µs) of `n` scrapes of `/metrics`.
fn scrape_cost(ng: &Nginx, n: usize) -> (u64, u128) {
    let pids = ng.worker_pids();
    let before = cpu_ticks(&pids);
    let t = std::time::Instant::now();
    for _ in 0..n {
        assert_eq!(get(ng.port, "/metrics").status, 200);
    }
    let wall = t.elapsed().as_micros() / n as u128;
    (cpu_ticks(&pids) - before, wall)
}

/// A scrape does not scan the zone: `slots_used` of a zone larger than
/// 1 MB is the figure the sweep counted, so 20 scrapes of a 1 GB zone cost
/// the workers about as little CPU as scrapes of a 1 MB zone (a full scan
/// of 1 GB took about 0.1 s of one worker per scrape). CPU time, not wall
/// time, so that a loaded machine does not make the bound flaky.
#[test]
fn scrape_cost_does_not_grow_with_the_zone() {
    let up = Upstream::start();
    let mut costs = vec![];
    for size in ["1m", "1024m"] {
        let ng = Nginx::builder().upstream_of(&up).start(&conf(
            &format!("rate_limit_window_zone $http_x_key zone=z:{size} window=1h;"),
            "rate_limit_window zone=z limit=100;",
        ));
        assert_eq!(get_key(ng.port, "/", "alice").status, 200);
        scrape_cost(&ng, 2); // warm-up: first touches, connection setup
        let (ticks, wall_us) = scrape_cost(&ng, 20);
        eprintln!("zone {size}: 20 scrapes cost the workers {ticks} ticks of 10 ms; {wall_us} µs per scrape (wall)");
        costs.push(ticks);
    }
    assert!(
        costs[1] <= 30,
        "20 scrapes of a 1 GB zone took {} ticks (10 ms) of worker CPU: the zone is scanned on scrape",
        costs[1]
    );
}

/// `slots_used` of a zone larger than 1 MB comes from the sweep's count
/// (one pass of up to 2^20 slots a second), and reaches the number of
/// clients active in the window.
#[test]
fn slots_used_of_a_large_zone_is_counted_by_the_sweep() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&conf(
        "rate_limit_window_zone $http_x_key zone=z:4m window=1h;",
        "rate_limit_window zone=z limit=100;",
    ));
    clear_of_boundary(HOUR_MS, 20_000);
    let slots = scrape(ng.port).val("rate_limit_window_slots", &[("zone", "z")]);
    assert!(slots > 65_536.0, "a 4 MB zone holds {slots} slots");
    for i in 0..10 {
        assert_eq!(get_key(ng.port, "/", &format!("client-{i}")).status, 200);
    }
    let mut used = 0.0;
    assert!(
        wait_for(Duration::from_secs(10), || {
            used = scrape(ng.port).val("rate_limit_window_slots_used", &[("zone", "z")]);
            used == 10.0
        }),
        "slots_used {used}, not 10, after 10 s"
    );
}
