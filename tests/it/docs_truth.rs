//! What the docs say about the code, checked against the code: every
//! metric family the module can expose is in the README's metrics table.
use crate::common;

use common::*;
use std::fs;

/// The metric family names (`rate_limit_window_…` string literals) in the
/// metrics code, src/api/metrics/.
fn metric_families() -> Vec<String> {
    let dir = manifest_dir().join("src/api/metrics");
    let mut names = Vec::new();
    for entry in fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let text = fs::read_to_string(entry.unwrap().path()).unwrap();
        for part in text.split("\"rate_limit_window_").skip(1) {
            let rest: String = part
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            if part[rest.len()..].starts_with('"') {
                names.push(format!("rate_limit_window_{rest}"));
            }
        }
    }
    names.sort();
    names.dedup();
    names
}

/// The README names each family in full or as `…_suffix` (after the
/// `rate_limit_window` of a name earlier in its row).
#[test]
fn every_metric_family_is_in_the_readme() {
    let families = metric_families();
    assert!(families.len() > 20, "only {families:?} found");
    let readme = fs::read_to_string(manifest_dir().join("README.md")).unwrap();
    let missing: Vec<&String> = families
        .iter()
        .filter(|f| {
            let short = format!("…{}", &f["rate_limit_window".len()..]);
            let suffix = &f["rate_limit_window".len()..];
            // In backquotes, whole: followed by the quote, its labels or
            // (a summary) `_sum`.
            let named = |n: &str| {
                ["`", "{", "_sum"]
                    .iter()
                    .any(|end| readme.contains(&format!("`{n}{end}")))
            };
            // Or, after a family of its row, as `_suffix` (`_delay_turns`).
            !named(f) && !named(&short) && !named(suffix)
        })
        .collect();
    assert!(
        missing.is_empty(),
        "the README's metrics table lacks {missing:?}"
    );
}

/// The JSON object printed on the line after `command` in `doc`.
fn printed_json(doc: &str, command: &str) -> serde_json::Value {
    let text = fs::read_to_string(manifest_dir().join(doc)).unwrap();
    let mut lines = text.lines();
    lines
        .find(|l| l.trim() == command)
        .unwrap_or_else(|| panic!("{doc} no longer shows {command:?}"));
    let line = lines.next().unwrap();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{doc}: {line}: {e}"))
}

/// The fields of an object, in order.
fn fields(v: &serde_json::Value) -> Vec<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

/// operations.md's lookup sample has the fields a lookup answers.
#[test]
fn the_lookup_sample_has_the_lookups_fields() {
    let printed = printed_json(
        "docs/operations.md",
        "$ curl -s 'http://127.0.0.1:8080/metrics?zone=per_ip&addr=127.0.0.1'",
    );
    let ng = Nginx::start(&http_conf(
        "rate_limit_window_zone $binary_remote_addr zone=per_ip:10m window=1m;
         server {
             listen 127.0.0.1:{{PORT}};
             location / { rate_limit_window zone=per_ip limit=100; empty_gif; }
             location = /metrics { rate_limit_window_metrics; }
         }",
    ));
    assert_eq!(get(ng.port, "/").status, 200);
    let r = get(ng.port, "/metrics?zone=per_ip&addr=127.0.0.1");
    let answered: serde_json::Value = serde_json::from_str(&r.text()).unwrap();
    assert_eq!(answered["current"], 1, "{answered}");
    let mut want = fields(&answered);
    let mut have = fields(&printed);
    want.sort();
    have.sort();
    assert_eq!(have, want, "operations.md's sample vs a lookup: {answered}");
}

/// The README: a server-level limit applies to every location without a
/// line of its own, the metrics location's included; a location with its
/// own line is limited by that line only.
#[test]
fn a_server_level_limit_also_limits_the_metrics_location() {
    let ng = Nginx::start(&http_conf(
        "rate_limit_window_zone $binary_remote_addr zone=s:1m window=1m;
         rate_limit_window_zone $binary_remote_addr zone=own:1m window=1m;
         server {
             listen 127.0.0.1:{{PORT}};
             rate_limit_window zone=s limit=2;
             location /own/ { rate_limit_window zone=own limit=100; empty_gif; }
             location = /metrics { rate_limit_window_metrics; }
         }",
    ));
    let status = |path: &str| get(ng.port, path).status;
    let own: Vec<u16> = (0..3).map(|_| status("/own/")).collect();
    assert_eq!(own, [200, 200, 200], "the location's own line only");
    let metrics: Vec<u16> = (0..3).map(|_| status("/metrics")).collect();
    assert_eq!(metrics, [200, 200, 429], "the server's limit=2 on /metrics");
}

/// operations.md's table of slots per zone, as `(zone label, slots)`.
fn slot_table() -> Vec<(String, u64)> {
    let text = fs::read_to_string(manifest_dir().join("docs/operations.md")).unwrap();
    let start = text
        .find("| zone | slots |")
        .expect("operations.md: no slot table");
    text[start..]
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            (
                cells[1].to_owned(),
                cells[2].replace(',', "").parse().unwrap(),
            )
        })
        .collect()
}

/// The slot counts the docs give are what `rate_limit_window_slots` says.
#[test]
fn the_slot_table_is_what_nginx_reports() {
    let ng = Nginx::start(&http_conf(
        "rate_limit_window_zone $binary_remote_addr zone=a:32k;
         rate_limit_window_zone $binary_remote_addr zone=b:1m;
         rate_limit_window_zone $binary_remote_addr zone=c:10m;
         rate_limit_window_zone $binary_remote_addr zone=d:1m redis=127.0.0.1:9
             secret=0123456789abcdef0123;
         server {
             listen 127.0.0.1:{{PORT}};
             location = /metrics { rate_limit_window_metrics; }
         }",
    ));
    let text = get(ng.port, "/metrics").text();
    let slots = |zone: &str| -> u64 {
        let name = format!("rate_limit_window_slots{{zone=\"{zone}\"}} ");
        let line = text.lines().find_map(|l| l.strip_prefix(name.as_str()));
        line.unwrap_or_else(|| panic!("{text}")).parse().unwrap()
    };
    let reported = [
        ("`32k` (the smallest)", slots("a")),
        ("`1m`", slots("b")),
        ("`10m`", slots("c")),
        ("`1m` with `redis=`", slots("d")),
    ];
    let want: Vec<(String, u64)> = reported.iter().map(|(z, n)| (z.to_string(), *n)).collect();
    assert_eq!(
        slot_table(),
        want,
        "docs/operations.md's slot table vs nginx"
    );
}

/// A lookup (GET) of a zone that does not exist answers as a write (PUT)
/// does: 404 with a JSON `error` naming the zone.
#[test]
fn an_unknown_zone_is_a_json_404_to_get_and_put() {
    let ng = Nginx::start(&http_conf(
        "rate_limit_window_zone $binary_remote_addr zone=z:1m;
         server {
             listen 127.0.0.1:{{PORT}};
             location = /api { rate_limit_window_metrics write=on; }
         }",
    ));
    let get_r = get(ng.port, "/api?zone=nope&key=k");
    let put_r = request(ng.port, "PUT", "/api?zone=nope&key=k", &[]);
    for r in [&get_r, &put_r] {
        assert_eq!(r.status, 404, "{}", r.describe());
        assert_eq!(r.header("content-type"), Some("application/json"));
        let v: serde_json::Value = serde_json::from_str(&r.text()).unwrap();
        assert_eq!(v["error"], "no zone \"nope\"", "{v}");
    }
}

/// The most requests admitted from `from_ms` to `to_ms` (ms into a window
/// of `window_ms`, the end excluded) after `previous` in the window before,
/// sending whenever one more fits: the most any spacing gets there.
fn most_admitted(previous: u32, limit: u32, window_ms: u64, from_ms: u64, to_ms: u64) -> u32 {
    use rate_limit_window_core::rule::window::{admits, Counts};
    let mut c = Counts {
        current: 0,
        previous,
    };
    for elapsed in from_ms..to_ms {
        while admits(c, elapsed, window_ms, limit) {
            c.current += 1;
        }
    }
    c.current
}

/// algorithm.md's examples are true of the core's rule for the whole
/// interval they describe (not only at one millisecond).
#[test]
fn the_algorithm_examples_hold_for_their_intervals() {
    let doc = fs::read_to_string(manifest_dir().join("docs/algorithm.md")).unwrap();
    let doc = doc.split_whitespace().collect::<Vec<_>>().join(" ");
    const MINUTE: u64 = 60_000;
    // 100 in the last 10 s of a minute, then the first 10 s of the next.
    let early = most_admitted(100, 100, MINUTE, 0, 10_000);
    assert_eq!(early, most_admitted(100, 100, MINUTE, 10_000, 10_001));
    let says = format!("gets at most {early} more in the first 10 s of the next one");
    assert!(doc.contains(&says), "algorithm.md should say {says:?}");
    assert!(doc.contains(&format!("so `current` stops at {early} by then")));
    // The incident: 550 (limit 600), then 550 in the second from :05.
    let spread = most_admitted(550, 600, MINUTE, 5_000, 6_000);
    let at_once = most_admitted(550, 600, MINUTE, 5_000, 5_001);
    let says = format!("the second burst admits at most {spread}");
    assert!(doc.contains(&says), "algorithm.md should say {says:?}");
    let says = format!("a burst all at :05.000 admits {at_once}");
    assert!(doc.contains(&says), "algorithm.md should say {says:?}");
}

/// `nginx -t` in a fresh prefix holding `files` (relative to the prefix;
/// a name ending in `/` is a directory the workers can write), with the
/// a zone with `state=st/kept.state` and one with `redis=` and
/// `redis_password_file=pw.txt` (`ca`: `redis_ca=ca.pem`); (success,
/// output, the prefix's path; the prefix itself is removed).
fn nginx_t_in_prefix(files: &[&str], ca: bool) -> (bool, String, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let prefix = make_prefix();
    let root = prefix.path().to_path_buf();
    for f in files {
        let path = root.join(f);
        if f.ends_with('/') {
            fs::create_dir_all(&path).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(0o777)).unwrap();
        } else {
            fs::write(&path, "a-password\n").unwrap();
        }
    }
    let redis = match ca {
        true => "redis=rediss://127.0.0.1:9 redis_ca=ca.pem",
        false => "redis=redis://127.0.0.1:9 redis_password_file=pw.txt",
    };
    let conf = format!(
        "load_module modules/{MODULE_FILE};
         worker_processes 2; error_log logs/error.log; pid logs/nginx.pid;
         events {{}}
         http {{
           rate_limit_window_zone $http_x_key zone=kept:1m window=1d state=st/kept.state;
           rate_limit_window_zone $http_x_key zone=shared:1m {redis} secret=0123456789abcdef0123;
           server {{ listen 127.0.0.1:1;
             location / {{ rate_limit_window zone=kept limit=5; rate_limit_window zone=shared limit=5;
                          proxy_pass http://127.0.0.1:9; }} }}
         }}"
    );
    fs::write(root.join("conf/nginx.conf"), conf).unwrap();
    let out = std::process::Command::new(nginx_bin())
        .args(["-t", "-p"])
        .arg(&root)
        .args(["-c", "conf/nginx.conf"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run nginx -t");
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    // The prefix is removed when `prefix` drops: keep only its path.
    (out.status.success(), text, root)
}

/// The README's relative paths: `state=` from nginx's prefix (as its pid
/// and logs, files nginx writes), `redis_password_file=` and `redis_ca=`
/// from the configuration directory (as nginx's `ssl_certificate`, files
/// it reads), each named in full when it is not there.
#[test]
fn relative_state_is_from_the_prefix_and_redis_files_from_the_conf_dir() {
    let readme = fs::read_to_string(manifest_dir().join("README.md")).unwrap();
    assert!(readme.contains("| file (relative: from the prefix, as nginx's `pid` and logs;"));
    assert!(
        readme.contains("PEM files (relative: from the configuration directory, unlike `state=`)")
    );
    assert!(readme.contains("| file (relative: from the configuration directory, unlike `state=`)"));
    // Both where the README says: accepted.
    let (ok, out, root) = nginx_t_in_prefix(&["st/", "conf/pw.txt"], false);
    assert!(ok, "{out}");
    let state = format!("\"{}/st/kept.state\"", root.display());
    assert!(out.contains(&state), "state= is {state}: {out}");
    // The password beside the prefix's root, not in conf/: refused,
    // naming conf/pw.txt.
    let (ok, out, root) = nginx_t_in_prefix(&["st/", "pw.txt"], false);
    let pw = format!(
        "\"redis_password_file\" file \"{}/conf/pw.txt\"",
        root.display()
    );
    assert!(!ok && out.contains(&pw), "expected {pw}: {out}");
    // The state directory under conf/, not the prefix: refused, naming
    // the prefix's st/.
    let (ok, out, root) = nginx_t_in_prefix(&["conf/st/", "conf/pw.txt"], false);
    assert!(!ok, "{out}");
    let state = format!("\"{}/st/kept.state\"", root.display());
    assert!(
        out.contains(&state) && out.contains("[emerg]"),
        "expected {state}: {out}"
    );
    // redis_ca= the same way as the password file.
    let (ok, out, root) = nginx_t_in_prefix(&["st/"], true);
    let ca = format!("\"redis_ca\" file \"{}/conf/ca.pem\"", root.display());
    assert!(!ok && out.contains(&ca), "expected {ca}: {out}");
}

/// The paragraphs of a Markdown text, each joined on one line; a table's
/// rows are a paragraph each.
fn paragraphs(text: &str) -> Vec<String> {
    let mut out = vec![];
    let mut cur: Vec<&str> = vec![];
    for l in text.lines() {
        if l.starts_with('|') || l.trim().is_empty() {
            if !cur.is_empty() {
                out.push(cur.join(" "));
                cur.clear();
            }
            if l.starts_with('|') {
                out.push(l.to_string());
            }
        } else {
            cur.push(l.trim());
        }
    }
    if !cur.is_empty() {
        out.push(cur.join(" "));
    }
    out
}

/// The numbers of 100 or more in `s` (`1,334`, `2452`), not parts of a
/// word, a version, a path or a hash.
fn counts_in(s: &str) -> Vec<String> {
    let b = s.as_bytes();
    let mut out = vec![];
    let mut i = 0;
    while i < b.len() {
        let glued = |c: u8| c.is_ascii_alphanumeric() || b"._#/-".contains(&c);
        if !b[i].is_ascii_digit() || (i > 0 && glued(b[i - 1])) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len()
            && (b[i].is_ascii_digit()
                || (b[i] == b',' && b.get(i + 1).is_some_and(u8::is_ascii_digit)))
        {
            i += 1;
        }
        let word = &s[start..i];
        let next_glued = b.get(i).is_some_and(|&c| c.is_ascii_alphanumeric());
        let value: u64 = word.replace(',', "").parse().unwrap_or(0);
        if !next_glued && value >= 100 {
            out.push(word.to_string());
        }
    }
    out
}

/// The counts given within 100 bytes of the word "instruction" in `para`.
fn instruction_counts(para: &str) -> Vec<String> {
    let mut out = vec![];
    for (at, _) in para.match_indices("instruction") {
        let (mut from, mut to) = (at.saturating_sub(100), (at + 111).min(para.len()));
        while !para.is_char_boundary(from) {
            from -= 1;
        }
        while !para.is_char_boundary(to) {
            to += 1;
        }
        out.extend(counts_in(&para[from..to]));
    }
    out
}

/// Instructions per request are given in one place, BENCHMARKS.md (written
/// by `make bench`); the other pages link to it and restate none.
/// docs/performance.md is their history: every section of it that gives a
/// count names the commit it was measured at.
#[test]
fn instruction_counts_are_in_benchmarks_md_only() {
    let root = manifest_dir();
    let mut pages: Vec<String> = fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| format!("docs/{}", e.unwrap().file_name().to_string_lossy()))
        .filter(|n| n.ends_with(".md") && n != "docs/performance.md")
        .collect();
    pages.extend(["README.md", "CONTRIBUTING.md", "bench/README.md"].map(String::from));
    let mut found = vec![];
    for page in &pages {
        let text = fs::read_to_string(root.join(page)).unwrap();
        for p in paragraphs(&text) {
            let counts = instruction_counts(&p);
            if !counts.is_empty() {
                found.push(format!("{page}: {counts:?} in {p:?}"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "instruction counts outside BENCHMARKS.md:\n{}",
        found.join("\n")
    );
    let readme = fs::read_to_string(root.join("README.md")).unwrap();
    assert!(readme.contains("(BENCHMARKS.md#instructions-per-request-callgrind)"));
    // performance.md: each section with a count names its commit.
    let perf = fs::read_to_string(root.join("docs/performance.md")).unwrap();
    let mut undated = vec![];
    for section in perf.split("\n#") {
        let has_count = paragraphs(section)
            .iter()
            .any(|p| !instruction_counts(p).is_empty());
        let names_commit = section
            .split(|c: char| !c.is_ascii_alphanumeric())
            .any(|w| {
                w.len() == 7
                    && w.bytes()
                        .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
                    && w.bytes().any(|c| c.is_ascii_digit())
                    && w.bytes().any(|c| c.is_ascii_lowercase())
            });
        if has_count && !names_commit {
            undated.push(section.lines().next().unwrap_or("").to_string());
        }
    }
    assert!(
        undated.is_empty(),
        "performance.md sections with counts and no commit: {undated:?}"
    );
}

/// performance.md says over which dates its findings were measured, and
/// every date it gives lies in that span.
#[test]
fn performance_md_dates_lie_in_the_span_it_states() {
    let perf = fs::read_to_string(manifest_dir().join("docs/performance.md")).unwrap();
    let flat = perf.split_whitespace().collect::<Vec<_>>().join(" ");
    let (first, last) = flat
        .split_once("measured at, from ")
        .and_then(|(_, r)| r.split_once(" to "))
        .map(|(a, r)| (a.to_string(), r[..10].to_string()))
        .expect("performance.md states its span: from DATE to DATE");
    let dates: Vec<&str> = flat
        .match_indices("2026-")
        .map(|(i, _)| &flat[i..(i + 10).min(flat.len())])
        .collect();
    assert!(dates.len() >= 5, "{dates:?}");
    for d in dates {
        assert!(
            first.as_str() <= d && d <= last.as_str(),
            "performance.md gives {d}, outside the span it states ({first} to {last})"
        );
    }
}
