#!/usr/bin/python3
"""A real gRPC server and client for tests/grpc.rs (Debian's python3-grpcio).

No protoc: raw bytes travel as they are (no serializers).

  grpc_peer.py serve
      Serves /test.Echo/Call and /test.Other/Call, answering b"echo:" + request. Prints
      "port N" once listening, then "call EPOCH_MS ATTEMPTS" per call
      (ATTEMPTS: the grpc-previous-rpc-attempts metadata, 0 if absent).

  grpc_peer.py call JSON
      JSON: {"target": "127.0.0.1:P", "method": "/test.Echo/Call",
             "key": "k", "calls": 1, "retry": false, "timeout_s": 10,
             "align": [WINDOW_MS, OFFSET_MS]}  (method and align optional)
      Makes `calls` unary calls one after another on one channel (with
      metadata x-key: key, and a retry policy for RESOURCE_EXHAUSTED when
      "retry" is true), printing one JSON line per call: code, details,
      trailing metadata, reply, and its start/end in epoch ms. With
      "align", the first call waits (channel connected) until OFFSET_MS
      into a window of WINDOW_MS.
"""
import json
import sys
import time
from concurrent import futures

import grpc

METHOD = "/test.Echo/Call"


def now_ms():
    return int(time.time() * 1000)


def serve():
    def call(request, context):
        md = dict(context.invocation_metadata())
        attempts = md.get("grpc-previous-rpc-attempts", "0")
        print(f"call {now_ms()} {attempts}", flush=True)
        return b"echo:" + request

    handlers = tuple(
        grpc.method_handlers_generic_handler(
            service, {"Call": grpc.unary_unary_rpc_method_handler(call)}
        )
        for service in ("test.Echo", "test.Other")
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers(handlers)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"port {port}", flush=True)
    server.wait_for_termination()


def retry_options():
    policy = {
        "methodConfig": [
            {
                "name": [{"service": "test.Echo"}, {"service": "test.Other"}],
                "retryPolicy": {
                    "maxAttempts": 3,
                    # Far shorter than any pushback: a retry that came this
                    # early would be rejected again.
                    "initialBackoff": "0.01s",
                    "maxBackoff": "0.02s",
                    "backoffMultiplier": 2,
                    "retryableStatusCodes": ["RESOURCE_EXHAUSTED"],
                },
            }
        ]
    }
    return [
        ("grpc.enable_retries", 1),
        ("grpc.service_config", json.dumps(policy)),
    ]


def one_call(stub, key, timeout):
    out = {"start_ms": now_ms()}
    try:
        reply, call = stub.with_call(
            b"hi", metadata=[("x-key", key)], timeout=timeout
        )
        out.update(
            code="OK",
            details="",
            reply=reply.decode(),
            trailing=[list(m) for m in (call.trailing_metadata() or [])],
        )
    except grpc.RpcError as e:
        out.update(
            code=e.code().name,
            details=e.details() or "",
            reply="",
            trailing=[list(m) for m in (e.trailing_metadata() or [])],
        )
    out["end_ms"] = now_ms()
    return out


def align(window_ms, offset_ms):
    """Sleeps until `offset_ms` into a window of `window_ms` (windows are
    aligned on the Unix epoch), so that the calls keep clear of a boundary."""
    pos = now_ms() % window_ms
    wait = offset_ms - pos if pos <= offset_ms else window_ms - pos + offset_ms
    time.sleep(wait / 1000)


def client(spec):
    options = retry_options() if spec.get("retry") else [("grpc.enable_retries", 0)]
    with grpc.insecure_channel(spec["target"], options=options) as channel:
        stub = channel.unary_unary(spec.get("method", METHOD))
        if "align" in spec:
            grpc.channel_ready_future(channel).result(timeout=10)
            align(*spec["align"])
        for _ in range(spec.get("calls", 1)):
            out = one_call(stub, spec["key"], spec.get("timeout_s", 10))
            print(json.dumps(out), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve()
    else:
        client(json.loads(sys.argv[2]))
