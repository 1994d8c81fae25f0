//! Replays every saved fuzz input under `fuzz/regressions/<target>/`
//! through the same check the fuzz target runs (`fuzz/src/lib.rs`), so
//! crashes found by `make fuzz` stay covered by plain `cargo test`.
//!
//! To add one: copy the crash file from `fuzz/artifacts/<target>/` into
//! `fuzz/regressions/<target>/` (any file name).

#[allow(dead_code)]
#[path = "../../../fuzz/src/lib.rs"]
mod checks;

use std::path::Path;

#[test]
fn every_target_has_a_check() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/fuzz_targets");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return; // fuzz/ not shipped with this copy of the core
    };
    for e in entries {
        let path = e.unwrap().path();
        let name = path.file_stem().unwrap().to_str().unwrap().to_owned();
        assert!(
            checks::TARGETS.iter().any(|(t, _)| *t == name),
            "fuzz target {name} has no check in fuzz/src/lib.rs"
        );
    }
}

#[test]
fn replay_regressions() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions");
    let Ok(dirs) = std::fs::read_dir(&root) else {
        return;
    };
    let mut replayed = 0;
    for d in dirs {
        let d = d.unwrap().path();
        if !d.is_dir() {
            continue;
        }
        let name = d.file_name().unwrap().to_str().unwrap().to_owned();
        let (_, check) = checks::TARGETS
            .iter()
            .find(|(t, _)| *t == name)
            .unwrap_or_else(|| panic!("fuzz/regressions/{name}: no such target"));
        let mut files: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .map(|f| f.unwrap().path())
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        for f in files {
            let data = std::fs::read(&f).unwrap();
            eprintln!("replaying {}", f.display());
            check(&data);
            replayed += 1;
        }
    }
    eprintln!("{replayed} regression inputs replayed");
}

/// A few hand-written inputs through every check, so the checks themselves
/// are exercised even with no saved regressions.
#[test]
fn checks_accept_seed_inputs() {
    let seeds: &[&[u8]] = &[
        b"",
        b"1m",
        b"10k",
        b"1h30m",
        b"500ms",
        b"1000000",
        b"zone=api:10m window=1m fail=closed redis=127.0.0.1:6379 sync=200ms secret=s",
        b"zone=api limit=$http_x_limit",
        b"zone=api limit=100",
        &[0xff; 64],
        &[0x0f; 300],
        &[
            0x00, 0x01, 0x02, 0x03, 0x0c, 0x0d, 0x0e, 0x0f, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60,
        ],
    ];
    for (_, check) in checks::TARGETS {
        for s in seeds {
            check(s);
        }
    }
}
