//! Prometheus and JSON metrics: fetch them and read one sample.

use std::collections::BTreeSet;

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
