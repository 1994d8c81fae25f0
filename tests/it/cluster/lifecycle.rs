//! The sync thread's life beside nginx's: stopped and replaced on reload,
//! quit and reload on time while Redis stalls, resumed after a worker is
//! killed during an outage, every signal blocked.
use super::*;

#[test]
fn sync_thread_stops_on_reload_and_quit() {
    // Counts carried across reloads are checked within one window: at a
    // minute boundary the earlier requests would only count in part.
    let clock = ShiftedClock::new();
    clock.clear_of_boundary(60_000, 20_000);
    let redis = RedisServer::start();
    let up = Upstream::start();
    let mut a = gateway_on(&clock, redis.port, &up, 5);
    for _ in 0..3 {
        assert_eq!(get_key(a.port, "/", "r").status, 200);
    }
    sleep(Duration::from_millis(300));
    for _ in 0..3 {
        let t = Instant::now();
        a.reload();
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "reload took {:?}",
            t.elapsed()
        );
    }
    // The new worker 0 took the sync over without pushing anything twice:
    // the cluster total is still the 3 admitted requests.
    sleep(Duration::from_millis(500));
    assert_eq!(hash_total(redis.port), 3, "cluster total after reloads");
    // Counts survived the reloads: 2 left of 5.
    assert_eq!(get_key(a.port, "/", "r").status, 200);
    assert_eq!(get_key(a.port, "/", "r").status, 200);
    assert_eq!(get_key(a.port, "/", "r").status, 429);
    let master = a.master_pid();
    let t = Instant::now();
    drop(a);
    // SAFETY: kill with signal 0 only checks that the process exists.
    let alive = unsafe { libc::kill(master, 0) } == 0;
    assert!(!alive, "nginx master still running after quit");
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "quit took {:?}",
        t.elapsed()
    );
}

#[test]
fn quit_and_reload_finish_within_2s_while_redis_stalls() {
    let redis = RedisServer::start();
    let proxy = FaultProxy::start(redis.port);
    let up = Upstream::start();
    let a = gateway(proxy.port, &up, 1000);
    send(a.port, "k", 20);
    sleep(Duration::from_millis(300));
    proxy.set(Fault::Stall);
    // A round is now stuck waiting for replies that never come.
    sleep(Duration::from_millis(1_500));
    let old = a.worker_pids();
    let t = Instant::now();
    sighup(&a);
    assert!(
        wait_for(Duration::from_secs(10), || old.iter().all(|&p| pid_gone(p))),
        "old workers still running"
    );
    let reload = t.elapsed();
    assert!(wait_for(Duration::from_secs(5), || a.worker_pids().len() == 2));
    sleep(Duration::from_millis(1_500));
    let master = a.master_pid();
    let t = Instant::now();
    // SAFETY: a signal to the master this test started.
    unsafe { libc::kill(master, libc::SIGQUIT) };
    assert!(
        wait_for(Duration::from_secs(10), || pid_gone(master)),
        "master still running"
    );
    let quit = t.elapsed();
    eprintln!("stalled Redis: old workers gone {reload:?} after the reload, quit took {quit:?}");
    assert!(reload < Duration::from_secs(2), "reload took {reload:?}");
    assert!(quit < Duration::from_secs(2), "quit took {quit:?}");
    drop(a);
}

#[test]
fn sync_resumes_after_reload_and_worker_kill_during_an_outage() {
    let mut redis = RedisServer::start();
    let redis_port = redis.port;
    let up = Upstream::start();
    let slow = SlowHttp::start(Duration::from_secs(6));
    let a = gateway_with(redis_port, &up, 40, Some(&slow.addr));
    let b = gateway(redis_port, &up, 40);
    send(a.port, "warm", 2);
    sleep(Duration::from_millis(300));
    let gen0 = metric(a.port, "rate_limit_window_sync_owner_generation");
    assert!(gen0 > 0.0);

    // Redis goes down; the sync backs off.
    redis.kill();
    sleep(Duration::from_secs(3));
    // In-flight slow requests keep the old workers (worker 0 among them)
    // alive through the reload.
    let old = a.worker_pids();
    let port = a.port;
    let slow_requests: Vec<_> = (0..10)
        .map(|_| std::thread::spawn(move || get(port, "/slow").status))
        .collect();
    sleep(Duration::from_millis(500));
    sighup(&a);
    assert!(wait_for(Duration::from_secs(10), || a.worker_pids().len() >= 4));
    assert!(
        old.iter().all(|&p| !pid_gone(p)),
        "an old worker exited early"
    );
    // Kill the new workers too: the master respawns them.
    let new: Vec<i32> = a
        .worker_pids()
        .into_iter()
        .filter(|p| !old.contains(p))
        .collect();
    for &p in &new {
        sigkill(p);
    }
    assert!(wait_for(Duration::from_secs(10), || {
        a.worker_pids()
            .iter()
            .filter(|p| !old.contains(p) && !new.contains(p))
            .count()
            == 2
    }));
    sleep(Duration::from_secs(1));

    // Redis comes back while the old workers still drain.
    let _redis = RedisServer::start_on(redis_port);
    let resumed = Instant::now();
    assert!(
        wait_for(Duration::from_secs(10), || {
            metric(a.port, "rate_limit_window_sync_lag_seconds") < 0.5
        }),
        "sync did not resume"
    );
    eprintln!("sync resumed {:?} after Redis came back", resumed.elapsed());
    for h in slow_requests {
        assert_eq!(h.join().unwrap(), 200);
    }
    assert!(wait_for(Duration::from_secs(10), || old
        .iter()
        .all(|&p| pid_gone(p))));
    let unexplained = forget_killed_workers(&a, &new);
    assert!(unexplained.is_empty(), "{unexplained:?}");
    sleep(Duration::from_secs(1));
    let gen = metric(a.port, "rate_limit_window_sync_owner_generation");
    assert!(
        gen > gen0,
        "generation {gen} after reload and respawn, was {gen0}"
    );
    let log = a.error_log();
    assert!(log.contains("redis sync now run by generation"), "{log}");

    // The two gateways share the limit again.
    clear_of_boundary(60_000, 8_000);
    let mut admitted = 0;
    for i in 0..80 {
        let port = if i % 2 == 0 { a.port } else { b.port };
        admitted += send(port, "shared", 1);
        sleep(Duration::from_millis(50));
    }
    eprintln!("after reload + kill during an outage: admitted {admitted} for limit 40");
    assert!(
        (40..=44).contains(&admitted),
        "admitted {admitted} for limit 40"
    );
}

#[test]
fn single_process_reloads_replace_the_sync_thread() {
    let clock = ShiftedClock::new();
    clock.clear_of_boundary(60_000, 20_000);
    let redis = RedisServer::start();
    let up = Upstream::start();
    // No workers: the single process runs the sync itself, and a reload
    // loads the new configuration in that same process. (nginx itself
    // serves HTTP unreliably after a reload in this mode, so the test
    // watches the process's threads and Redis, not HTTP.)
    let conf =
        gateway_conf(redis.port, 5, None).replace("master_process on;", "master_process off;");
    let a = clock.builder().workers(0).upstream_of(&up).start(&conf);
    let pid = a.master_pid();
    assert_eq!(send(a.port, "r", 3), 3);
    assert!(wait_for(Duration::from_secs(5), || hash_total(redis.port) == 3));
    for _ in 0..3 {
        let before = threads_named(pid, "rlw-sync");
        assert_eq!(before.len(), 1, "{before:?}");
        sighup(&a);
        // The old thread is joined before its configuration is freed, and
        // one new thread syncs the new configuration.
        assert!(
            wait_for(Duration::from_secs(5), || {
                let now = threads_named(pid, "rlw-sync");
                now.len() == 1 && now != before
            }),
            "sync threads after the reload: {:?}",
            threads_named(pid, "rlw-sync")
        );
    }
    sleep(Duration::from_millis(500));
    assert_eq!(hash_total(redis.port), 3, "nothing written twice");
    let k = keys(redis.port, "rlw:{c:*");
    assert_eq!(
        cli(redis.port, &["HLEN", &k[0]]).trim(),
        "1",
        "one gateway id"
    );
    let t = Instant::now();
    // SAFETY: a signal to the process this test started.
    unsafe { libc::kill(pid, libc::SIGQUIT) };
    assert!(wait_for(Duration::from_secs(10), || pid_gone(pid)));
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "quit took {:?}",
        t.elapsed()
    );
    drop(a);
}

#[test]
fn sync_threads_block_every_signal() {
    let redis = RedisServer::start();
    let up = Upstream::start();
    let a = gateway(redis.port, &up, 10);
    let mut found = vec![];
    assert!(wait_for(Duration::from_secs(5), || {
        found = a
            .worker_pids()
            .into_iter()
            .flat_map(|p| {
                threads_named(p, "rlw-sync")
                    .into_iter()
                    .map(move |t| (p, t))
            })
            .collect();
        found.len() == 1
    }));
    let (pid, tid) = &found[0];
    let status = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).unwrap();
    let blocked = status
        .lines()
        .find_map(|l| l.strip_prefix("SigBlk:"))
        .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
        .unwrap();
    // The signals nginx handles in its event loop.
    for sig in [
        libc::SIGHUP,
        libc::SIGINT,
        libc::SIGQUIT,
        libc::SIGTERM,
        libc::SIGUSR1,
        libc::SIGUSR2,
        libc::SIGWINCH,
        libc::SIGCHLD,
        libc::SIGALRM,
        libc::SIGIO,
        libc::SIGPIPE,
    ] {
        assert!(
            blocked & (1 << (sig - 1)) != 0,
            "signal {sig} not blocked in the sync thread (SigBlk {blocked:016x})"
        );
    }
}
