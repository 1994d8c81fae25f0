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
"""
import json
import socket
import sys


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


def main(argv):
    cmd = argv[1]
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
