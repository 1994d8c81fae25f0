//! Every recipe of README.md and docs/ runs as printed (issue 45).
//!
//! A recipe is an ```nginx block marked `<!-- runnable -->` (a whole
//! nginx.conf) or `<!-- runnable: http -->` (what goes inside `http {}`),
//! and the ```console blocks marked `<!-- runnable -->` after it in the
//! same file, whose `$ ` lines are run in order against it and whose other
//! lines are the output they must print (`…` stands for any text). Every
//! other ```nginx block must say why it is not one: `<!-- fragment: … -->`.
//! CONTRIBUTING.md ("Recipes that run") lists what the harness changes, and
//! only that: the module's path, the listening ports (free local ones, in
//! the curl lines too), the application's address (a test upstream), and
//! `/etc/nginx/`, `/var/lib/nginx/`, `/var/log/nginx/` under a test directory.

use crate::common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// Where a recipe's nginx.conf goes (under the test directory).
const CONF: &str = "/etc/nginx/nginx.conf";
/// System paths a recipe may use, put under the test directory.
const MAPPED: [&str; 3] = ["/etc/nginx/", "/var/lib/nginx/", "/var/log/nginx/"];

/// What a runnable nginx block is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A whole nginx.conf (`load_module` and `events {}` added if absent).
    Conf,
    /// The inside of `http {}`.
    Http,
}

/// One `$ ` line and the output printed under it.
#[derive(Debug)]
struct Step {
    line: usize,
    cmd: String,
    expect: Vec<String>,
}

/// A runnable nginx block and the console steps after it.
#[derive(Debug)]
struct Recipe {
    doc: String,
    line: usize,
    kind: Kind,
    /// Files the configuration reads, made by the harness (`needs …`).
    needs: Vec<String>,
    text: String,
    steps: Vec<Step>,
}

/// A fenced block: its language and text, from line `at` (1-based).
fn block(lines: &[&str], at: usize) -> Option<(String, String, usize)> {
    let open = lines.get(at)?.trim();
    let lang = open.strip_prefix("```")?.to_string();
    let mut text = String::new();
    for (n, l) in lines.iter().enumerate().skip(at + 1) {
        if l.trim() == "```" {
            return Some((lang, text, n));
        }
        text.push_str(l);
        text.push('\n');
    }
    panic!("unterminated block at line {}", at + 1);
}

/// The `$ ` steps of a console block.
fn steps(text: &str, first_line: usize) -> Vec<Step> {
    let mut out: Vec<Step> = vec![];
    for (n, l) in text.lines().enumerate() {
        if let Some(cmd) = l.strip_prefix("$ ") {
            out.push(Step {
                line: first_line + n,
                cmd: cmd.to_string(),
                expect: vec![],
            });
        } else if let Some(s) = out.last_mut() {
            s.expect.push(l.to_string());
        } else {
            panic!("line {}: output before any command", first_line + n);
        }
    }
    out
}

/// What an `<!-- runnable… -->` marker before an nginx block says: its
/// kind and the files it needs.
fn attributes(doc: &str, line: usize, marker: &str) -> (Kind, Vec<String>) {
    let attrs = marker
        .trim_start_matches("<!-- runnable")
        .trim_end_matches("-->")
        .trim()
        .trim_start_matches(':');
    let mut kind = Kind::Conf;
    let mut needs = vec![];
    for a in attrs.split(';').map(str::trim).filter(|a| !a.is_empty()) {
        if a == "http" {
            kind = Kind::Http;
        } else if let Some(files) = a.strip_prefix("needs ") {
            needs.extend(files.split_whitespace().map(String::from));
        } else {
            panic!("{doc}:{line}: unknown attribute {a:?}");
        }
    }
    (kind, needs)
}

/// Takes the fenced block `lang`/`body` at `line` (1-based) of `doc`,
/// after `marker` (the comment line before it, if any), into `out`.
fn take_block(
    doc: &str,
    line: usize,
    marker: Option<&str>,
    (lang, body): (&str, String),
    out: &mut Vec<Recipe>,
) {
    let recipe = |kind, needs, text, steps| Recipe {
        doc: doc.to_string(),
        line: line + 1,
        kind,
        needs,
        text,
        steps,
    };
    match (lang, marker) {
        ("nginx", Some(m)) if m.starts_with("<!-- runnable") => {
            let (kind, needs) = attributes(doc, line, m);
            out.push(recipe(kind, needs, body, vec![]));
        }
        ("nginx", Some(m)) if m.starts_with("<!-- fragment:") => {}
        ("nginx", _) => panic!(
            "{doc}:{line}: an nginx block that is neither <!-- runnable --> nor \
             <!-- fragment: why -->"
        ),
        ("console", Some(m)) if m.starts_with("<!-- runnable: ") => {
            // Against a file of the checkout (nginx-conf/...).
            let file = m
                .trim_start_matches("<!-- runnable: ")
                .trim_end_matches("-->")
                .trim();
            let text = fs::read_to_string(manifest_dir().join(file))
                .unwrap_or_else(|e| panic!("{doc}:{line}: {file}: {e}"));
            out.push(recipe(Kind::Conf, vec![], text, steps(&body, line + 1)));
        }
        ("console", Some(m)) if m.starts_with("<!-- runnable") => {
            let r = out
                .last_mut()
                .unwrap_or_else(|| panic!("{doc}:{line}: a runnable console before any recipe"));
            r.steps.extend(steps(&body, line + 1));
        }
        _ => {}
    }
}

/// The recipes of `doc` (relative to the checkout); panics on an nginx
/// block that is neither runnable nor a marked fragment.
fn recipes(doc: &str) -> Vec<Recipe> {
    let text = fs::read_to_string(manifest_dir().join(doc)).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut out: Vec<Recipe> = vec![];
    let mut marker: Option<&str> = None;
    let mut n = 0;
    while n < lines.len() {
        let l = lines[n].trim();
        if l.starts_with("<!-- runnable") || l.starts_with("<!-- fragment") {
            marker = Some(l);
        } else if l.starts_with("```") && l != "```" {
            let (lang, body, end) = block(&lines, n).unwrap();
            take_block(doc, n + 1, marker.take(), (&lang, body), &mut out);
            n = end;
        } else if !l.is_empty() {
            marker = None;
        }
        n += 1;
    }
    out
}

/// `…` matches any text (at least nothing); everything else is literal.
fn matches(expect: &str, actual: &str) -> bool {
    let parts: Vec<&str> = expect.split('…').collect();
    if parts.len() == 1 {
        return expect == actual;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !actual.starts_with(first) || actual.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &actual[first.len()..];
    for p in &parts[1..parts.len() - 1] {
        match rest.find(p) {
            Some(at) => rest = &rest[at + p.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// A recipe being run: its directory, ports, upstream and nginx.
struct Run {
    root: tempfile::TempDir,
    /// (port as printed, port here).
    ports: Vec<(u16, u16)>,
    up: Upstream,
    nginx: Option<Child>,
    /// Where the recipe is, for messages.
    at: String,
}

impl Run {
    fn dir(&self) -> &Path {
        self.root.path()
    }

    /// `/etc/nginx/…` and the others, under the test directory.
    fn map(&self, s: &str) -> String {
        let mut s = s.to_string();
        for p in MAPPED {
            s = s.replace(p, &format!("{}{p}", self.dir().display()));
        }
        s
    }

    /// The reverse of [`Run::map`], for what nginx prints.
    fn unmap(&self, s: &str) -> String {
        let mut s = s.to_string();
        for p in MAPPED {
            s = s.replace(&format!("{}{p}", self.dir().display()), p);
        }
        s
    }

    /// The port here of `printed` (a new free one the first time).
    fn port(&mut self, printed: u16) -> u16 {
        if let Some(&(_, p)) = self.ports.iter().find(|(q, _)| *q == printed) {
            return p;
        }
        let p = free_port();
        self.ports.push((printed, p));
        p
    }

    /// The nginx.conf this recipe runs.
    fn conf(&mut self, r: &Recipe) -> String {
        let module = module_so();
        let load = format!("load_module {};", module.display());
        let text = match r.kind {
            Kind::Http => format!("{load}\nevents {{}}\nhttp {{\n{}}}\n", r.text),
            Kind::Conf => {
                let mut t = String::new();
                let mut loaded = false;
                for l in r.text.lines() {
                    if l.trim_start().starts_with("load_module ") && l.contains(MODULE_FILE) {
                        t.push_str(&load);
                        loaded = true;
                    } else {
                        t.push_str(l);
                    }
                    t.push('\n');
                }
                if !loaded {
                    t = format!("{load}\n{t}");
                }
                if !t.lines().any(|l| l.trim_start().starts_with("events")) {
                    t = t.replacen(&format!("{load}\n"), &format!("{load}\nevents {{}}\n"), 1);
                }
                t
            }
        };
        let text = self.listen(&with_stream_module(&text));
        let text = self.upstreams(&text);
        self.map(&text)
    }

    /// Every `listen PORT` or `listen ADDR:PORT` on a free local port, and
    /// a `listen` for a `server {}` without one (port 80).
    fn listen(&mut self, conf: &str) -> String {
        let mut out = String::new();
        for l in conf.lines() {
            let t = l.trim_start();
            if let Some(rest) = t.strip_prefix("listen ") {
                let addr = rest.split([' ', ';']).next().unwrap();
                let printed: u16 = addr.rsplit(':').next().unwrap().parse().unwrap();
                let here = self.port(printed);
                let indent = &l[..l.len() - t.len()];
                out.push_str(&format!(
                    "{indent}listen 127.0.0.1:{here}{}\n",
                    &rest[addr.len()..]
                ));
            } else {
                out.push_str(l);
                out.push('\n');
            }
        }
        // A server without `listen` listens on 80 (as root).
        let mut with = String::new();
        let mut rest = out.as_str();
        while let Some(at) = rest.find("server {") {
            let body_from = at + "server {".len();
            let end = closing(rest, body_from);
            with.push_str(&rest[..body_from]);
            if !rest[body_from..end].contains("listen ") {
                let p = self.port(80);
                with.push_str(&format!("\n        listen 127.0.0.1:{p};"));
            }
            rest = &rest[body_from..];
        }
        with.push_str(rest);
        with
    }

    /// Every other `127.0.0.1:PORT`, `localhost:PORT` of the conf: a port
    /// the conf listens on is its port here, any other (the
    /// application's) the test upstream.
    fn upstreams(&self, conf: &str) -> String {
        let here: Vec<u16> = self.ports.iter().map(|&(_, p)| p).collect();
        let mut out = String::new();
        let mut rest = conf;
        while let Some(at) = ["127.0.0.1:", "localhost:"]
            .iter()
            .filter_map(|h| rest.find(h).map(|a| (a, h.len())))
            .min()
        {
            let (at, len) = at;
            let digits: String = rest[at + len..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            out.push_str(&rest[..at]);
            let printed = self.ports.iter().find(|&&(q, _)| Ok(q) == digits.parse());
            match (digits.parse::<u16>(), printed) {
                (Ok(p), _) if here.contains(&p) => out.push_str(&rest[at..at + len + digits.len()]),
                (Ok(_), Some(&(_, p))) => out.push_str(&format!("127.0.0.1:{p}")),
                (Ok(_), None) => out.push_str(&self.up.addr()),
                _ => out.push_str(&rest[at..at + len + digits.len()]),
            }
            rest = &rest[at + len + digits.len()..];
        }
        out.push_str(rest);
        out
    }

    /// A command line as run here: mapped paths, and the curl URLs on the
    /// ports here.
    fn command(&mut self, cmd: &str) -> String {
        let mut c = self.map(cmd);
        for host in ["127.0.0.1", "localhost"] {
            for scheme in ["http://", "https://"] {
                let from = format!("{scheme}{host}");
                let mut out = String::new();
                let mut rest = c.as_str();
                while let Some(at) = rest.find(&from) {
                    out.push_str(&rest[..at + from.len()]);
                    rest = &rest[at + from.len()..];
                    let printed = match rest.strip_prefix(':') {
                        Some(r) => {
                            let d: String = r.chars().take_while(char::is_ascii_digit).collect();
                            rest = &r[d.len()..];
                            d.parse().unwrap()
                        }
                        None => 80,
                    };
                    let here = self.port(printed);
                    out.push_str(&format!(":{here}"));
                }
                out.push_str(rest);
                c = out;
            }
        }
        c
    }

    /// `nginx -t` as the recipe runs it: (success, what it printed).
    fn nginx_t(&self) -> (bool, String) {
        let out = Command::new(nginx_bin())
            .arg("-t")
            .arg("-p")
            .arg(format!("{}/", self.dir().display()))
            .arg("-c")
            .arg(self.map(CONF))
            .stdin(Stdio::null())
            .output()
            .expect("run nginx -t");
        let mut text = String::from_utf8_lossy(&out.stderr).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stdout));
        (out.status.success(), self.unmap(&text))
    }

    /// Starts nginx (in the foreground, as the harness's child) and waits
    /// until every port answers.
    fn start(&mut self) {
        if self.nginx.is_some() {
            return;
        }
        let conf = fs::read_to_string(self.map(CONF)).unwrap();
        let said = fs::File::create(self.dir().join("logs/stderr.log")).unwrap();
        let mut cmd = Command::new(nginx_bin());
        cmd.arg("-p")
            .arg(format!("{}/", self.dir().display()))
            .arg("-c")
            .arg(self.map(CONF));
        if !conf.lines().any(|l| l.trim_start().starts_with("daemon ")) {
            cmd.args(["-g", "daemon off;"]);
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(said.try_clone().unwrap())
            .stderr(said)
            .spawn()
            .expect("start nginx");
        self.nginx = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        let ports: Vec<u16> = self.ports.iter().map(|&(_, p)| p).collect();
        while !ports.iter().all(|&p| probe(p)) {
            if let Some(Ok(Some(st))) = self.nginx.as_mut().map(Child::try_wait) {
                let log = read_lossy(&self.dir().join("logs/error.log"));
                panic!("{}: nginx exited ({st}):\n{log}", self.at);
            }
            assert!(
                Instant::now() < deadline,
                "{}: nginx did not answer",
                self.at
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `nginx -s quit`: the workers finish and exit (writing state files).
    fn quit(&mut self) {
        let Some(mut child) = self.nginx.take() else {
            panic!("{}: nginx -s quit, but nginx is not running", self.at);
        };
        // SAFETY: kill(2) on the master this run started.
        unsafe { libc::kill(child.id() as i32, libc::SIGQUIT) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while child.try_wait().ok().flatten().is_none() {
            assert!(Instant::now() < deadline, "{}: nginx did not quit", self.at);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Runs one step; what it printed.
    fn step(&mut self, cmd: &str) -> String {
        match cmd {
            "nginx -t" => return self.nginx_t().1,
            "nginx" => {
                self.start();
                return String::new();
            }
            "nginx -s quit" => {
                self.quit();
                return String::new();
            }
            _ => {}
        }
        if cmd.contains("curl ") {
            self.start();
        }
        let c = self.command(cmd);
        let out = Command::new("sh")
            .args(["-c", &c])
            .current_dir(self.dir())
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("{}: {c}: {e}", self.at));
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        self.unmap(&text)
    }

    /// The files of `needs`: a PEM certificate (openssl) for `.pem`, a
    /// password line otherwise; readable by root only.
    fn needs(&self, files: &[String]) {
        for f in files {
            let p = PathBuf::from(self.map(f));
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            if f.ends_with(".pem") {
                let key = p.with_extension("key");
                let st = Command::new("openssl")
                    .args([
                        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    ])
                    .args(["-subj", "/CN=redis.internal", "-keyout"])
                    .arg(&key)
                    .arg("-out")
                    .arg(&p)
                    .output()
                    .expect("openssl (make test installs it)");
                assert!(
                    st.status.success(),
                    "{}",
                    String::from_utf8_lossy(&st.stderr)
                );
            } else {
                fs::write(&p, "a-password\n").unwrap();
            }
            fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if let Some(mut c) = self.nginx.take() {
            // SAFETY: kill(2) on the master this run started.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(5);
            while c.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The offset of the `}` that closes the block whose body starts at
/// `from` in `s`.
fn closing(s: &str, from: usize) -> usize {
    let mut depth = 1;
    for (i, c) in s[from..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return from + i;
                }
            }
            _ => {}
        }
    }
    s.len()
}

/// Runs recipe `r`: its configuration passes `nginx -t` (unless its own
/// steps run `nginx -t` and show what it says), then each step prints
/// what the doc shows. Returns the number of steps run.
fn run(r: &Recipe) -> usize {
    let root = tempfile::Builder::new()
        .prefix("rlw-recipe-")
        .tempdir()
        .unwrap();
    // The workers (nobody) go through it, as through /etc or /var/lib.
    fs::set_permissions(root.path(), fs::Permissions::from_mode(0o755)).unwrap();
    fs::create_dir_all(root.path().join("logs")).unwrap();
    // nginx's own directories, which nginx -t expects (it opens the logs).
    fs::create_dir_all(root.path().join("var/log/nginx")).unwrap();
    let mut run = Run {
        root,
        ports: vec![],
        up: Upstream::start(),
        nginx: None,
        at: format!("{}:{}", r.doc, r.line),
    };
    let conf = run.conf(r);
    let path = PathBuf::from(run.map(CONF));
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(&path, &conf).unwrap();
    run.needs(&r.needs);
    if !r.steps.iter().any(|s| s.cmd == "nginx -t") {
        let (ok, out) = run.nginx_t();
        assert!(
            ok && out.contains("test is successful"),
            "{}: nginx -t of\n{conf}\n{out}",
            run.at
        );
    }
    for s in &r.steps {
        let got = run.step(&s.cmd);
        let got: Vec<&str> = got.lines().map(str::trim_end).collect();
        let want: Vec<&str> = s.expect.iter().map(|l| l.trim_end()).collect();
        let same = got.len() == want.len() && want.iter().zip(&got).all(|(w, g)| matches(w, g));
        assert!(
            same,
            "{}:{}: $ {}\n--- the doc shows ---\n{}\n--- it printed ---\n{}\n--- conf ---\n{conf}",
            r.doc,
            s.line,
            s.cmd,
            want.join("\n"),
            got.join("\n")
        );
    }
    r.steps.len()
}

/// The docs with recipes: every runnable one of each is run.
const DOCS: &[&str] = &[
    "README.md",
    "docs/algorithm.md",
    "docs/charge.md",
    "docs/delay.md",
    "docs/gateways.md",
    "docs/grpc.md",
    "docs/in-flight.md",
    "docs/operations.md",
    "docs/performance.md",
    "docs/phases.md",
    "docs/quotas.md",
    "docs/runtime-control.md",
    "docs/shedding.md",
    "docs/state-file.md",
    "docs/stream.md",
];

/// Runs every recipe of `doc`; (recipes, steps).
fn run_doc(doc: &str) -> (usize, usize) {
    let rs = recipes(doc);
    let steps = rs.iter().map(run).sum();
    (rs.len(), steps)
}

#[test]
fn every_doc_is_listed_and_every_nginx_block_is_a_recipe_or_says_why_not() {
    let mut docs: Vec<String> = fs::read_dir(manifest_dir().join("docs"))
        .unwrap()
        .map(|e| format!("docs/{}", e.unwrap().file_name().to_string_lossy()))
        .filter(|n| n.ends_with(".md"))
        .collect();
    docs.push("README.md".into());
    docs.sort();
    let mut listed: Vec<String> = DOCS.iter().map(|d| d.to_string()).collect();
    listed.sort();
    assert_eq!(docs, listed, "a doc is missing from DOCS");
    // `recipes` panics on an unmarked block.
    let total: usize = DOCS.iter().map(|d| recipes(d).len()).sum();
    assert!(total >= 10, "{total} recipes");
}

#[test]
fn the_matcher_takes_ellipses_as_any_text() {
    assert!(matches("a…c", "abc") && matches("a…c", "ac") && matches("…", "x"));
    assert!(matches(
        "{\"fp\":\"…\",\"n\":…}",
        "{\"fp\":\"0a1b\",\"n\":3}"
    ));
    assert!(!matches("a…c", "ab") && !matches("abc", "abd") && !matches("a…b…c", "acb"));
}

#[test]
fn readme_recipes_run_as_printed() {
    let (recipes, _) = run_doc("README.md");
    assert!(recipes >= 1);
}

#[test]
fn runtime_control_recipes_run_as_printed() {
    let (recipes, steps) = run_doc("docs/runtime-control.md");
    assert!(
        recipes >= 1 && steps >= 6,
        "{recipes} recipes, {steps} steps"
    );
}

#[test]
fn state_file_recipes_run_as_printed() {
    let (recipes, steps) = run_doc("docs/state-file.md");
    assert!(
        recipes >= 1 && steps >= 6,
        "{recipes} recipes, {steps} steps"
    );
}

#[test]
fn the_other_docs_recipes_run_as_printed() {
    for doc in DOCS {
        if ["README.md", "docs/runtime-control.md", "docs/state-file.md"].contains(doc) {
            continue;
        }
        run_doc(doc);
    }
}

/// README.md is the users' page: at most 400 lines, the rest in docs/.
#[test]
fn readme_is_at_most_400_lines() {
    let n = fs::read_to_string(manifest_dir().join("README.md"))
        .unwrap()
        .lines()
        .count();
    assert!(n <= 400, "README.md has {n} lines: move detail into docs/");
}
