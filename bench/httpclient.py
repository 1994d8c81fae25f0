#!/usr/bin/env python3
"""Small deterministic HTTP/1.1 client for bench.sh.

One keep-alive connection, requests sent in order (optionally pipelined in
batches), statuses counted. Used where wrk's time-based runs do not fit:

  capacity  PORT PATH N [BATCH [METRICS_PATH ZONE]]
      pass 1: keys c0 .. c(N-1) once each (oldest first);
      pass 2: the same keys again, newest first.
      Prints one JSON object: pass-1 and pass-2 status counts and
      "remembered" = number of pass-2 rejections (status 429 or 503).
      With METRICS_PATH and ZONE, also "slots_used": the module's own
      rate_limit_window_slots_used{zone="ZONE"} read between the passes.

  fixed     PORT PATH COUNT hot|distinct [BATCH]
      COUNT requests, X-Key constant ("hot") or c<i> ("distinct").
      Prints a JSON object of status counts.

  abusers   PORT PATH N prime|check [BATCH]
      prime: keys a0 .. a(N-1) twice each (the second over a limit of 1);
      check: each once more. Prints a JSON object of status counts and
      "refused" = number of 429 or 503.

  cluster   PORTS WINDOW_S LIMIT NWINDOWS
      PORTS: three gateways' ports, comma-separated. From the next window
      boundary (windows aligned on the UTC epoch, WINDOW_S seconds long)
      for NWINDOWS windows, three clients each send 3 x LIMIT requests per
      window, evenly paced and interleaved: "one" to the first gateway only
      (/local, a zone without Redis), "rr_sync" round-robin across the three
      (/sync, a zone synced through Redis) and "rr_local" round-robin
      across the three (/local). Prints a JSON object: the requests each
      client had admitted (status 200) per window, the statuses other than
      200 and 429, and how late the pacing fell behind at worst (ms).
"""
import json
import socket
import sys
import time

# (client, index of the gateway for tick k, location, X-Key)
CLUSTER_FLOWS = (
    ("one", lambda k: 0, "/local", "one"),
    ("rr_sync", lambda k: k % 3, "/sync", "rr-sync"),
    ("rr_local", lambda k: k % 3, "/local", "rr-local"),
)


class Conn:
    def __init__(self, port, host="127.0.0.1"):
        self.host = host
        self.port = port
        self.sock = socket.create_connection((host, port), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.rf = self.sock.makefile("rb", buffering=1 << 16)

    def close(self):
        try:
            self.rf.close()
            self.sock.close()
        except OSError:
            pass

    def read_response(self):
        line = self.rf.readline()
        if not line:
            raise RuntimeError("connection closed by server")
        parts = line.split(None, 2)
        status = int(parts[1])
        length = 0
        close = False
        while True:
            h = self.rf.readline()
            if not h:
                raise RuntimeError("connection closed inside headers")
            if h in (b"\r\n", b"\n"):
                break
            name, _, value = h.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value.strip())
            elif name == b"transfer-encoding":
                raise RuntimeError("chunked responses are not supported")
            elif name == b"connection" and value.strip().lower() == b"close":
                close = True
        if length:
            body = self.rf.read(length)
            if len(body) != length:
                raise RuntimeError("short body")
        if close:
            raise RuntimeError("server closed the keep-alive connection")
        return status

    def run(self, path, keys, batch=1):
        """Sends one GET per key, in order; returns the list of statuses."""
        statuses = []
        head = "GET %s HTTP/1.1\r\nHost: %s\r\nX-Key: " % (path, self.host)
        for i in range(0, len(keys), batch):
            chunk = keys[i:i + batch]
            self.sock.sendall("".join(head + k + "\r\n\r\n" for k in chunk).encode())
            for _ in chunk:
                statuses.append(self.read_response())
        return statuses


def metric(port, path, series):
    """Value of one series of a Prometheus text page, or None."""
    import urllib.request
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(series + " "):
                return int(float(line.split()[-1]))
    return None


def count(statuses):
    c = {}
    for s in statuses:
        c[str(s)] = c.get(str(s), 0) + 1
    return c


def rejected(statuses):
    return sum(1 for s in statuses if s in (429, 503))


def cluster(ports, window_s, limit, nwindows):
    """The `cluster` command (see the module doc); returns the JSON object."""
    conns = [Conn(p) for p in ports]
    period = window_s / (3.0 * limit)  # seconds between one client's requests
    ticks = int(round(nwindows * window_s / period))
    admitted = {f[0]: [0] * nwindows for f in CLUSTER_FLOWS}
    other = {}
    t0 = (int(time.time()) // window_s + 1) * window_s
    time.sleep(max(0.0, t0 - time.time()))
    late = 0.0
    for k in range(ticks):
        due = t0 + k * period
        now = time.time()
        if now < due:
            time.sleep(due - now)
        else:
            late = max(late, now - due)
        for name, gw, path, key in CLUSTER_FLOWS:
            w = int((time.time() - t0) // window_s)
            st = conns[gw(k)].run(path, [key])[0]
            if st == 200 and w < nwindows:
                admitted[name][w] += 1
            elif st not in (200, 429):
                other[str(st)] = other.get(str(st), 0) + 1
    for c in conns:
        c.close()
    return {"window_s": window_s, "limit": limit, "per_window": 3 * limit,
            "admitted": admitted, "other_statuses": other, "max_late_ms": round(late * 1000)}


def main(argv):
    cmd = argv[1]
    if cmd == "cluster":
        ports = [int(p) for p in argv[2].split(",")]
        print(json.dumps(cluster(ports, int(argv[3]), int(argv[4]), int(argv[5]))))
        return
    port = int(argv[2])
    path = argv[3]
    if cmd == "capacity":
        n = int(argv[4])
        batch = int(argv[5]) if len(argv) > 5 else 128
        keys = ["c%d" % i for i in range(n)]
        c = Conn(port)
        first = c.run(path, keys, batch)
        slots_used = None
        if len(argv) > 7:
            slots_used = metric(port, argv[6],
                                'rate_limit_window_slots_used{zone="%s"}' % argv[7])
        second = c.run(path, keys[::-1], batch)
        c.close()
        res = {
            "n": n,
            "pass1": count(first),
            "pass2": count(second),
            "pass1_rejected": rejected(first),
            "remembered": rejected(second),
        }
        if slots_used is not None:
            res["slots_used"] = slots_used
        print(json.dumps(res))
    elif cmd == "abusers":
        n = int(argv[4])
        batch = int(argv[6]) if len(argv) > 6 else 128
        keys = ["a%d" % i for i in range(n)]
        if argv[5] == "prime":
            keys = [k for k in keys for _ in range(2)]
        c = Conn(port)
        st = c.run(path, keys, batch)
        c.close()
        print(json.dumps({"n": n, "statuses": count(st), "refused": rejected(st)}))
    elif cmd == "fixed":
        total = int(argv[4])
        mode = argv[5]
        batch = int(argv[6]) if len(argv) > 6 else 1
        keys = ["hot"] * total if mode == "hot" else ["c%d" % i for i in range(total)]
        c = Conn(port)
        st = c.run(path, keys, batch)
        c.close()
        print(json.dumps(count(st)))
    else:
        sys.exit("unknown command %r" % cmd)


if __name__ == "__main__":
    main(sys.argv)
