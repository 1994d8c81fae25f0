//! Prometheus and JSON metrics: fetch them, parse the exposition strictly,
//! and read one sample.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::http::{get, url_encode};

/// The value of one Prometheus sample, matched by name and exact label set
/// (in any order). None when absent.
pub fn prom_value(text: &str, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let Some((head, val)) = line.rsplit_once(' ') else {
            continue;
        };
        let (name, lbl) = match head.split_once('{') {
            Some((n, rest)) => (n, rest.trim_end_matches('}')),
            None => (head, ""),
        };
        if name != metric {
            continue;
        }
        let got: BTreeSet<(String, String)> = lbl
            .split(',')
            .filter(|s| !s.is_empty())
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.trim_matches('"').to_string()))
            .collect();
        let want: BTreeSet<(String, String)> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        if got == want {
            return val.parse().ok();
        }
    }
    None
}

/// GET /metrics and return the exposition text.
pub fn metrics_text(port: u16) -> String {
    let r = get(port, "/metrics");
    assert_eq!(r.status, 200, "{}", r.describe());
    r.text()
}

/// The JSON view of one key: GET /metrics?zone=ZONE&key=<percent-encoded>.
pub fn key_json(port: u16, zone: &str, key: &[u8]) -> serde_json::Value {
    let r = get(
        port,
        &format!(
            "/metrics?zone={}&key={}",
            url_encode(zone.as_bytes()),
            url_encode(key)
        ),
    );
    assert_eq!(r.status, 200, "{}", r.describe());
    serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("bad JSON {e}: {}", r.text()))
}

/// One sample of a Prometheus text exposition (format 0.0.4).
#[derive(Debug)]
pub struct Sample {
    pub metric: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A parsed exposition: its samples, and the `# HELP` text of each family.
pub struct Scrape {
    pub samples: Vec<Sample>,
    pub docs: HashMap<String, String>,
}

impl Scrape {
    /// Parses `text` as the Prometheus text format 0.0.4, strictly: every
    /// line is blank, a comment, or a sample whose metric and label names
    /// are valid, whose label values are quoted with only `\\`, `\"`
    /// and `\n` escaped, and whose value is a number (timestamps refused:
    /// the module writes none). Err names the first bad line.
    pub fn parse(text: &str) -> Result<Scrape, String> {
        let mut scrape = Scrape {
            samples: Vec::new(),
            docs: HashMap::new(),
        };
        for (n, line) in text.lines().enumerate() {
            let bad = |why: &str| format!("line {}: {why}: {line:?}", n + 1);
            if let Some(help) = line.strip_prefix("# HELP ") {
                let (name, doc) = help
                    .split_once(' ')
                    .ok_or_else(|| bad("HELP without text"))?;
                check_name(name, true).map_err(|e| bad(&e))?;
                scrape.docs.insert(name.to_owned(), doc.to_owned());
            } else if let Some(ty) = line.strip_prefix("# TYPE ") {
                let (name, kind) = ty
                    .split_once(' ')
                    .ok_or_else(|| bad("TYPE without a type"))?;
                check_name(name, true).map_err(|e| bad(&e))?;
                let kinds = ["counter", "gauge", "histogram", "summary", "untyped"];
                if !kinds.contains(&kind) {
                    return Err(bad("unknown TYPE"));
                }
            } else if !line.is_empty() && !line.starts_with('#') {
                scrape.samples.push(sample(line).map_err(|e| bad(&e))?);
            }
        }
        Ok(scrape)
    }
}

/// A metric name (`[a-zA-Z_:][a-zA-Z0-9_:]*`) or, without `colon`, a label
/// name.
fn check_name(name: &str, colon: bool) -> Result<(), String> {
    let ok = |c: char, first: bool| {
        c.is_ascii_alphabetic() || c == '_' || (colon && c == ':') || (!first && c.is_ascii_digit())
    };
    let mut chars = name.chars();
    match chars.next() {
        Some(c) if ok(c, true) && chars.all(|c| ok(c, false)) => Ok(()),
        _ => Err(format!("bad name {name:?}")),
    }
}

/// One sample line: `name[{labels}] value`.
fn sample(line: &str) -> Result<Sample, String> {
    let (head, rest) = match line.find(['{', ' ']) {
        Some(i) => line.split_at(i),
        None => return Err("no value".into()),
    };
    check_name(head, true)?;
    let (labels, rest) = match rest.strip_prefix('{') {
        Some(r) => labels(r)?,
        None => (BTreeMap::new(), rest),
    };
    let value = rest.strip_prefix(' ').ok_or("no space before the value")?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().map_err(|_| format!("bad value {v:?}"))?,
    };
    Ok(Sample {
        metric: head.to_owned(),
        labels,
        value,
    })
}

/// The labels after `{` up to `}`, and what follows the `}`.
fn labels(mut s: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut out = BTreeMap::new();
    loop {
        if let Some(rest) = s.strip_prefix('}') {
            return Ok((out, rest));
        }
        let (name, rest) = s.split_once("=\"").ok_or("a label without =\"")?;
        check_name(name, false)?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next().ok_or("an unterminated label value")? {
                (i, '"') => break i,
                (_, '\\') => match chars.next().map(|c| c.1) {
                    Some('\\') => value.push('\\'),
                    Some('"') => value.push('"'),
                    Some('n') => value.push('\n'),
                    other => return Err(format!("bad escape {other:?}")),
                },
                (_, c) => value.push(c),
            }
        };
        if out.insert(name.to_owned(), value).is_some() {
            return Err(format!("label {name} twice"));
        }
        s = &rest[end + 1..];
        s = s.strip_prefix(',').unwrap_or(s);
    }
}

/// The metric names of a doc's alert recipes (its ```yaml block after
/// `after`).
pub fn recipe_metrics(doc: &str, after: &str) -> Vec<String> {
    let path = super::conf::example_conf_dir().join("..").join(doc);
    let text = std::fs::read_to_string(path).unwrap();
    let rest = &text[text.find(after).expect("the recipes")..];
    let start = rest.find("```yaml\n").expect("a yaml block");
    let block = &rest[start..start + rest[start + 7..].find("```").unwrap() + 7];
    let mut names: Vec<String> = block
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("rate_limit_window_"))
        .map(String::from)
        .collect();
    names.sort();
    names.dedup();
    assert!(!names.is_empty(), "no metric in {doc}'s recipes");
    names
}
