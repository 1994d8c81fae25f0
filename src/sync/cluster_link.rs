//! A Redis Cluster client over the sync's bounded connections
//! (`raw_conn.rs`): one deadline for a whole call, slot-map reads and
//! redirections included, checked on every read and write with the
//! thread's stop flag, so a node that trickles its replies ends a call at
//! its deadline and lets a quitting worker go at once.
//!
//! The slot map comes from `CLUSTER SLOTS`, asked of the seed nodes in turn.
//! Each node gets one connection, opened when a command first needs it and
//! logged in as the zone's user (TLS with the zone's certificates). A
//! pipeline is split by node (the slot of each command's key, core's
//! `cluster::slot`; a keyless command goes with the first keyed one), sent
//! to every node before any reply is read, and the replies are put back in
//! command order. `MOVED` re-reads the map and sends the command where it
//! says; `ASK` sends `ASKING` and the command to the named node, once;
//! `TRYAGAIN` and `CLUSTERDOWN` retry after a pause. An error reply stays a
//! `Value::ServerError` in its command's place; a `CLUSTERDOWN` that stays,
//! or an unreachable node while the nodes still up say
//! `cluster_state:fail`, fails the call as `cluster_down`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rate_limit_window_core::cluster::slot::command_slot;
use rate_limit_window_core::conf::redis_url::{RedisNode, Secret};
use redis::{Cmd, Value};

use crate::sync::cluster_map::{redirect, Addr, Redirect, SlotMap};
use crate::sync::link_error::{left, LinkError, LinkErrorKind};
use crate::sync::node_conn::{connect, RedisTarget};
use crate::sync::raw_conn::{Login, RawConn};

/// Rounds of sends per call: the first and the redirections after it.
const TRIES: u32 = 5;

/// First pause before a `TRYAGAIN` or `CLUSTERDOWN` is retried, doubled at
/// each retry (ms).
const RETRY_MS: u64 = 20;

/// Longest wait of one `CLUSTER INFO` that tells why a node could not be
/// reached (ms), within the call's deadline.
const PROBE_MS: u64 = 100;

/// Longest sleep between two checks of the stop flag in a pause (ms).
const NAP_MS: u64 = 10;

/// An open Redis Cluster client.
pub struct ClusterLink {
    target: RedisTarget,
    stop: Arc<AtomicBool>,
    map: SlotMap,
    /// One connection per node, opened on first use.
    conns: HashMap<Addr, RawConn>,
}

/// One command of a call.
struct Job<'p> {
    cmd: &'p Cmd,
    /// The slot of its key; `None` for a keyless command.
    slot: Option<u16>,
    /// Where a redirection sent it (else the map's node of its slot).
    to: Option<Addr>,
    /// `ASKING` goes first (an `ASK` redirection).
    asking: bool,
    /// Its last reply; `done` once it is not a redirection.
    reply: Value,
    done: bool,
}

/// What one round of sends asks of the next.
#[derive(Default)]
struct Step {
    /// A node that answered `MOVED`: re-read the map from it.
    moved: Option<Addr>,
    /// A `TRYAGAIN` or `CLUSTERDOWN`: pause before the next round.
    retry: bool,
}

impl ClusterLink {
    /// Reads the slot map from the seed nodes in turn before `deadline`,
    /// each getting an equal share of the time left, so that one that
    /// hangs leaves time to ask the next.
    pub fn open(
        target: &RedisTarget,
        deadline: Instant,
        stop: &Arc<AtomicBool>,
    ) -> Result<ClusterLink, LinkError> {
        let seeds: Vec<Addr> = target
            .params
            .addr
            .nodes
            .iter()
            .filter_map(|n| match n {
                RedisNode::Tcp { host, port } => Some((host.clone(), *port)),
                RedisNode::Unix(_) => None,
            })
            .collect();
        let mut link = ClusterLink {
            target: target.clone(),
            stop: stop.clone(),
            map: SlotMap::empty(),
            conns: HashMap::new(),
        };
        let mut last = LinkError::new(LinkErrorKind::Connection, "no cluster node");
        for (i, seed) in seeds.iter().enumerate() {
            let share = left(deadline)? / (seeds.len() - i) as u32;
            match link.refresh(seed, Instant::now() + share) {
                Ok(()) => return Ok(link),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Sends `pipe` and returns one reply per command, in command order,
    /// all before `deadline`.
    pub fn exec(
        &mut self,
        pipe: &redis::Pipeline,
        deadline: Instant,
    ) -> Result<Vec<Value>, LinkError> {
        let mut jobs: Vec<Job<'_>> = pipe.cmd_iter().map(job).collect();
        let mut pause = RETRY_MS;
        for _ in 0..TRIES {
            if jobs.iter().all(|j| j.done) {
                break;
            }
            let step = self.round(&mut jobs, deadline)?;
            if let Some(at) = step.moved {
                self.refresh(&at, deadline)?;
            }
            if step.retry {
                self.pause(pause, deadline)?;
                pause *= 2;
            }
        }
        if jobs
            .iter()
            .any(|j| !j.done && is_code(&j.reply, "CLUSTERDOWN"))
        {
            return Err(LinkError::new(
                LinkErrorKind::ClusterDown,
                "the cluster answers CLUSTERDOWN",
            ));
        }
        Ok(jobs.into_iter().map(|j| j.reply).collect())
    }

    /// Sends every pending command to its node (all nodes first, then the
    /// replies: one round trip), and settles their replies.
    fn round(&mut self, jobs: &mut [Job<'_>], deadline: Instant) -> Result<Step, LinkError> {
        let groups = self.groups(jobs)?;
        let mut sent = Vec::with_capacity(groups.len());
        for (at, idx) in &groups {
            let pipe = node_pipe(jobs, idx);
            self.on_node(at, deadline, |c| {
                c.send(&pipe, deadline).map(|()| Vec::new())
            })?;
            sent.push(pipe.len());
        }
        let mut step = Step::default();
        for ((at, idx), n) in groups.iter().zip(sent) {
            let replies = self.on_node(at, deadline, |c| c.recv(n, deadline))?;
            settle(jobs, idx, replies, at, &mut step);
        }
        Ok(step)
    }

    /// The pending commands by node, in the order nodes are first needed.
    fn groups(&self, jobs: &[Job<'_>]) -> Result<Vec<(Addr, Vec<usize>)>, LinkError> {
        let keyless = jobs
            .iter()
            .find_map(|j| j.slot)
            .and_then(|s| self.map.node_of(s))
            .or_else(|| self.map.nodes().first());
        let mut groups: Vec<(Addr, Vec<usize>)> = Vec::new();
        for (i, j) in jobs.iter().enumerate().filter(|(_, j)| !j.done) {
            let at = match (&j.to, j.slot) {
                (Some(to), _) => Some(to),
                (None, Some(s)) => self.map.node_of(s),
                (None, None) => keyless,
            }
            .ok_or_else(|| LinkError::new(LinkErrorKind::ClusterDown, "a slot has no node"))?;
            match groups.iter_mut().find(|(a, _)| a == at) {
                Some((_, idx)) => idx.push(i),
                None => groups.push((at.clone(), vec![i])),
            }
        }
        Ok(groups)
    }

    /// Re-reads the slot map from the node at `at`.
    fn refresh(&mut self, at: &Addr, deadline: Instant) -> Result<(), LinkError> {
        let mut pipe = redis::pipe();
        pipe.cmd("CLUSTER").arg("SLOTS");
        let reply = self
            .on_node(at, deadline, |c| c.exec(&pipe, deadline))?
            .pop()
            .unwrap_or(Value::Nil);
        if let Value::ServerError(e) = &reply {
            let kind = match e.code() {
                "NOPERM" | "NOAUTH" | "WRONGPASS" => LinkErrorKind::Auth,
                _ => LinkErrorKind::Reply,
            };
            // The code only: the details could quote an argument.
            let mut err = LinkError::new(kind, format!("CLUSTER SLOTS refused: {}", e.code()));
            err.denied = crate::sync::denied::refused(std::slice::from_ref(&reply));
            return Err(err);
        }
        self.map = SlotMap::from_slots(&reply, &at.0)?;
        Ok(())
    }

    /// Runs `f` on the connection to `at` (opened and logged in first when
    /// there is none). A failure drops that connection and is the call's:
    /// see [`ClusterLink::failed`].
    fn on_node(
        &mut self,
        at: &Addr,
        deadline: Instant,
        f: impl FnOnce(&mut RawConn) -> redis::RedisResult<Vec<Value>>,
    ) -> Result<Vec<Value>, LinkError> {
        self.stopping()?;
        let r = self
            .conn(at, deadline)
            .and_then(|c| f(c).map_err(LinkError::from));
        r.map_err(|e| self.failed(at, e, deadline))
    }

    /// The connection to `at`, opened when there is none.
    fn conn(&mut self, at: &Addr, deadline: Instant) -> Result<&mut RawConn, LinkError> {
        if !self.conns.contains_key(at) {
            let a = &self.target.params.addr;
            let login = Login {
                username: a.username.as_deref(),
                password: a.password.as_ref().map(Secret::as_str),
                db: 0,
            };
            let c = connect(&self.target, &login, (&at.0, at.1), deadline, &self.stop)?;
            self.conns.insert(at.clone(), c);
        }
        Ok(self.conns.get_mut(at).expect("just connected"))
    }

    /// The error of a call whose node at `at` failed with `e`: its
    /// connection is dropped; a node that cannot be reached is the cluster
    /// being down when the nodes still up say so (`cluster_state:fail`),
    /// asked of up to three of them while the deadline allows.
    fn failed(&mut self, at: &Addr, e: LinkError, deadline: Instant) -> LinkError {
        self.conns.remove(at);
        if e.kind != LinkErrorKind::Connection {
            return e;
        }
        let others: Vec<Addr> = self
            .map
            .nodes()
            .iter()
            .filter(|n| *n != at)
            .take(3)
            .cloned()
            .collect();
        for n in others {
            match self.cluster_state(&n, deadline) {
                Some(true) => {
                    return LinkError::new(
                        LinkErrorKind::ClusterDown,
                        format!(
                            "a node is unreachable and the cluster is down ({})",
                            e.detail
                        ),
                    )
                }
                Some(false) => return e,
                None => {}
            }
        }
        e
    }

    /// Whether the node at `at` says `cluster_state:fail` (`None`: no
    /// answer within [`PROBE_MS`] and the deadline).
    fn cluster_state(&mut self, at: &Addr, deadline: Instant) -> Option<bool> {
        let d = deadline.min(Instant::now() + Duration::from_millis(PROBE_MS));
        let mut pipe = redis::pipe();
        pipe.cmd("CLUSTER").arg("INFO");
        let r = self
            .conn(at, d)
            .and_then(|c| c.exec(&pipe, d).map_err(LinkError::from));
        let text = match r.map(|mut v| v.pop()) {
            Ok(Some(Value::BulkString(b))) => String::from_utf8_lossy(&b).into_owned(),
            Ok(Some(Value::VerbatimString { text, .. })) => text,
            _ => {
                self.conns.remove(at);
                return None;
            }
        };
        Some(text.contains("cluster_state:fail"))
    }

    /// Waits `ms` (or until the deadline), checking the stop flag.
    fn pause(&self, ms: u64, deadline: Instant) -> Result<(), LinkError> {
        let until = deadline.min(Instant::now() + Duration::from_millis(ms));
        while let Some(d) = until.checked_duration_since(Instant::now()) {
            self.stopping()?;
            std::thread::sleep(d.min(Duration::from_millis(NAP_MS)));
        }
        left(deadline).map(|_| ())
    }

    /// An error once the thread is stopping.
    fn stopping(&self) -> Result<(), LinkError> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(LinkError::new(LinkErrorKind::Timeout, "stopping"));
        }
        Ok(())
    }
}

/// A command not sent yet.
fn job(cmd: &Cmd) -> Job<'_> {
    let args: Vec<&[u8]> = cmd
        .args_iter()
        .filter_map(|a| match a {
            redis::Arg::Simple(b) => Some(b),
            redis::Arg::Cursor => None,
        })
        .collect();
    Job {
        cmd,
        slot: command_slot(&args),
        to: None,
        asking: false,
        reply: Value::Nil,
        done: false,
    }
}

/// The pipeline of the commands `idx` for one node (`ASKING` before those
/// an `ASK` sent there).
fn node_pipe(jobs: &[Job<'_>], idx: &[usize]) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    for &i in idx {
        if jobs[i].asking {
            pipe.cmd("ASKING");
        }
        pipe.add_command(jobs[i].cmd.clone());
    }
    pipe
}

/// Takes the replies of the node at `at` to the commands `idx`: a reply
/// is kept, a redirection sends its command again.
fn settle(jobs: &mut [Job<'_>], idx: &[usize], replies: Vec<Value>, at: &Addr, step: &mut Step) {
    let mut replies = replies.into_iter();
    for &i in idx {
        let j = &mut jobs[i];
        if j.asking {
            // `ASKING`'s `OK`.
            replies.next();
        }
        let v = replies.next().unwrap_or(Value::Nil);
        j.asking = false;
        j.to = None;
        match redirect(&v, &at.0) {
            None => j.done = true,
            Some(Redirect::Moved(to)) => {
                step.moved = Some(to.clone());
                j.to = Some(to);
            }
            Some(Redirect::Ask(to)) => {
                j.to = Some(to);
                j.asking = true;
            }
            Some(Redirect::Retry) => step.retry = true,
        }
        j.reply = v;
    }
}

/// Whether `v` is an error reply of code `code`.
fn is_code(v: &Value, code: &str) -> bool {
    matches!(v, Value::ServerError(e) if e.code() == code)
}
