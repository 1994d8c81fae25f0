//! `redis_mode=cluster` over TLS with a password: three TLS-only nodes
//! (`tls-cluster yes`, client certificates required, the bus's too: the
//! nodes connect to each other with the client certificate) made with
//! `redis-cli --tls --cluster create`. The module's cluster client opens
//! each node's connection as single mode does (rustls over the bounded
//! socket, the node's certificate checked against the address the slot
//! map gives, the client certificate, `AUTH`), and two gateways share
//! their clients' limits through it.
use crate::common;

use std::time::Duration;

use common::redis_servers::*;
use common::*;

const PASSWORD: &str = "cluster-tls-S3cret";

/// Three TLS-only cluster nodes of one PKI, every slot assigned.
struct TlsCluster {
    nodes: Vec<RedisProc>,
    pki: Pki,
}

impl TlsCluster {
    fn start() -> TlsCluster {
        let pki = Pki::new("rlw cluster CA");
        let nodes: Vec<RedisProc> = (0..3)
            .map(|i| {
                let (port, bus) = (free_port(), free_port());
                let conf = format!(
                    "bind 127.0.0.1\nport 0\ntls-port {port}\nsave \"\"\nappendonly no\n\
                     tls-cert-file {}\ntls-key-file {}\ntls-ca-cert-file {}\n\
                     tls-client-cert-file {}\ntls-client-key-file {}\n\
                     tls-auth-clients yes\ntls-cluster yes\nrequirepass {PASSWORD}\n\
                     masterauth {PASSWORD}\ncluster-enabled yes\n\
                     cluster-config-file nodes-{port}.conf\ncluster-port {bus}\n\
                     cluster-node-timeout 2000\n",
                    pki.file("server.crt"),
                    pki.file("server.key"),
                    pki.file("ca.crt"),
                    pki.file("client.crt"),
                    pki.file("client.key"),
                );
                RedisProc::spawn(&server_bin(), pki.dir.path(), &format!("t{i}"), &conf, port)
            })
            .collect();
        let c = TlsCluster { nodes, pki };
        let mut args = vec!["--cluster".to_owned(), "create".to_owned()];
        args.extend(c.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)));
        args.extend(["--cluster-replicas", "0", "--cluster-yes"].map(String::from));
        let out = c.cli(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(
            out.contains("All 16384 slots covered"),
            "cluster create: {out}"
        );
        let ok = wait_for(Duration::from_secs(20), || {
            c.nodes.iter().all(|n| {
                let p = n.port.to_string();
                c.cli(&["-p", &p, "CLUSTER", "INFO"])
                    .contains("cluster_state:ok")
            })
        });
        assert!(ok, "the TLS cluster did not reach state ok");
        c
    }

    /// redis-cli over TLS with the client certificate and the password.
    fn cli(&self, args: &[&str]) -> String {
        self.pki.cli(PASSWORD, args)
    }

    /// The module's keys (`rlw:*`) on each node.
    fn keys_per_node(&self) -> Vec<usize> {
        self.nodes
            .iter()
            .map(|n| {
                let p = n.port.to_string();
                let out = self.cli(&["-p", &p, "--scan", "--pattern", "rlw:*"]);
                out.lines().filter(|l| !l.is_empty()).count()
            })
            .collect()
    }
}

#[test]
fn clients_share_limits_over_a_tls_cluster_with_a_password() {
    let cluster = TlsCluster::start();
    let seeds: Vec<String> = cluster
        .nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port))
        .collect();
    let pki = &cluster.pki;
    let redis = format!(
        "redis=rediss://:{PASSWORD}@{} redis_mode=cluster redis_ca={} redis_cert={} redis_key={}",
        seeds.join(","),
        pki.file("ca.crt"),
        pki.file("client.crt"),
        pki.file("client.key")
    );
    let up = Upstream::start();
    let (_clock, a, b) = crate::redis_cluster::two_gateways(&redis, &up, 20, 20_000);
    let clients = 6;
    for c in 0..clients {
        let admitted = alternate([a.port, b.port], &format!("client-{c}"), 30);
        let total = admitted[0] + admitted[1];
        eprintln!("client-{c} over a TLS cluster: admitted {admitted:?} = {total} for limit 20");
        assert!(
            (20..=24).contains(&total),
            "client-{c}: {total} ({admitted:?})"
        );
    }
    let per_node = cluster.keys_per_node();
    eprintln!("keys per TLS cluster node: {per_node:?}");
    assert!(
        per_node.iter().filter(|&&n| n > 0).count() >= 2,
        "every key on one node: {per_node:?}"
    );
    crate::redis_cluster::assert_no_failures(&[&a, &b]);
}
