//! The slot map of a Redis Cluster: which master serves each of the
//! 16,384 slots, read from a node's `CLUSTER SLOTS`, and the redirections
//! a node answers (`MOVED`, `ASK`). Pure bookkeeping: the connections are
//! `cluster_link.rs`'s.

use rate_limit_window_core::cluster::slot::SLOTS;
use redis::Value;

use crate::sync::link_error::{LinkError, LinkErrorKind};

/// A node's address: host (as the cluster announces it) and port.
pub type Addr = (String, u16);

/// No node serves the slot.
const NONE: u16 = u16::MAX;

/// Which master serves each slot.
pub struct SlotMap {
    /// The masters, in the order `CLUSTER SLOTS` named them.
    nodes: Vec<Addr>,
    /// Per slot, an index in `nodes`, or [`NONE`].
    owner: Vec<u16>,
}

impl SlotMap {
    /// A map that serves no slot (before the first read).
    pub fn empty() -> SlotMap {
        SlotMap {
            nodes: Vec::new(),
            owner: vec![NONE; usize::from(SLOTS)],
        }
    }

    /// The map of a `CLUSTER SLOTS` reply, asked of a node at `asked`
    /// (an empty host in the reply means that node's host).
    pub fn from_slots(reply: &Value, asked: &str) -> Result<SlotMap, LinkError> {
        let Value::Array(ranges) = reply else {
            return Err(bad_map());
        };
        let mut map = SlotMap::empty();
        for r in ranges {
            let (start, end, addr) = range(r, asked).ok_or_else(bad_map)?;
            let node = map.index_of(&addr);
            for slot in start..=end {
                map.owner[usize::from(slot)] = node;
            }
        }
        if map.nodes.is_empty() {
            return Err(LinkError::new(
                LinkErrorKind::ClusterDown,
                "the cluster serves no slot",
            ));
        }
        Ok(map)
    }

    /// The index of `addr` in the nodes, added when new.
    fn index_of(&mut self, addr: &Addr) -> u16 {
        match self.nodes.iter().position(|n| n == addr) {
            Some(i) => i as u16,
            None => {
                self.nodes.push(addr.clone());
                (self.nodes.len() - 1) as u16
            }
        }
    }

    /// The master that serves `slot`.
    pub fn node_of(&self, slot: u16) -> Option<&Addr> {
        let i = *self.owner.get(usize::from(slot))?;
        self.nodes.get(usize::from(i))
    }

    /// Every master the map names.
    pub fn nodes(&self) -> &[Addr] {
        &self.nodes
    }
}

fn bad_map() -> LinkError {
    LinkError::new(LinkErrorKind::Reply, "unusable CLUSTER SLOTS reply")
}

/// One entry of `CLUSTER SLOTS`: `[start, end, [host, port, id, ..], replicas..]`.
fn range(v: &Value, asked: &str) -> Option<(u16, u16, Addr)> {
    let Value::Array(a) = v else { return None };
    let [start, end, Value::Array(master), ..] = a.as_slice() else {
        return None;
    };
    let slot = |v: &Value| match v {
        Value::Int(n) => u16::try_from(*n).ok().filter(|&s| s < SLOTS),
        _ => None,
    };
    let (start, end) = (slot(start)?, slot(end)?);
    let host = match master.first()? {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok()?,
        Value::SimpleString(s) => s.clone(),
        _ => return None,
    };
    // An empty host (or `?`, unknown) is the node that answered.
    let host = if host.is_empty() || host == "?" {
        asked.to_owned()
    } else {
        host
    };
    let port = match master.get(1)? {
        Value::Int(n) => u16::try_from(*n).ok()?,
        _ => return None,
    };
    (start <= end).then_some((start, end, (host, port)))
}

/// What a node answered to one command.
pub enum Redirect {
    /// `MOVED slot host:port`: the slot is served by that node now.
    Moved(Addr),
    /// `ASK slot host:port`: this once, ask that node (after `ASKING`).
    Ask(Addr),
    /// `TRYAGAIN` (a slot mid-migration) or `CLUSTERDOWN`: retry soon.
    Retry,
}

/// The redirection a reply is (`None`: a reply to keep), an empty host
/// being `asked`'s.
pub fn redirect(v: &Value, asked: &str) -> Option<Redirect> {
    let Value::ServerError(e) = v else {
        return None;
    };
    let to = || {
        let (_, addr) = e.details()?.trim().split_once(' ')?;
        let (host, port) = addr.rsplit_once(':')?;
        let host = if host.is_empty() { asked } else { host };
        Some((host.to_owned(), port.parse().ok()?))
    };
    match e.code() {
        "MOVED" => to().map(Redirect::Moved),
        "ASK" => to().map(Redirect::Ask),
        "TRYAGAIN" | "CLUSTERDOWN" => Some(Redirect::Retry),
        _ => None,
    }
}
