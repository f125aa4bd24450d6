#!/usr/bin/env python3
"""A hostile agent: the guest side of the agent protocol, fuzzed.

Run inside a sandbox in place of `sbx-agent relay` (see tests/hostile_guest.rs):
sbxd writes request frames to our stdin and reads our stdout as the agent's
answers. Every frame we send is random or a mutation of a valid one: wrong
ids, wrong kinds, replies of the wrong type, garbage JSON, lengths over the
limit, truncated frames, large payloads, event floods on stream ids (net_dial
with one reused connection id, net_resolve, net_data for unknown
connections), and silence. The seed of each connection is the base seed the
test wrote into /tmp/hostile-fuzz plus the connection's number (counted in
/tmp/hostile-fuzz-n), so a failing run can be replayed from the seed the test
prints.

Modes, chosen by files the guest writes:
  /tmp/hostile-fuzz      random and mutated frames (bounded run time)
  /tmp/hostile-dialflood answer hello and ping correctly, then flood the
                         net_serve stream with net_dial events that all reuse
                         one connection id, to the host:port in that file
                         (once: the file is removed after the flood)
"""

import json
import os
import random
import struct
import sys
import threading
import time

MAX_FRAME = 8 * 1024 * 1024
out_lock = threading.Lock()
stdout = sys.stdout.buffer
stdin = sys.stdin.buffer


def frame(header, payload=b""):
    h = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack(">II", 4 + len(h) + len(payload), len(h)) + h + payload


def send(raw):
    with out_lock:
        try:
            stdout.write(raw)
            stdout.flush()
        except (BrokenPipeError, OSError):
            os._exit(0)


def read_exact(n):
    buf = b""
    while len(buf) < n:
        chunk = stdin.read(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def read_frame():
    head = read_exact(8)
    if head is None:
        return None
    total, hlen = struct.unpack(">II", head)
    rest = read_exact(total - 4)
    if rest is None:
        return None
    try:
        return json.loads(rest[:hlen])
    except ValueError:
        return {}


def hello(i):
    return {"id": i, "kind": "reply",
            "msg": {"type": "hello", "version": 1,
                    "boot_id": "5bd00000-0000-4000-8000-000000000001"}}


REPLY_TYPES = ["pong", "ok", "exec", "process", "processes", "output",
               "stream_end", "file_written", "file_read", "stat", "dir", "hello", "nonsense"]
EVENT_TYPES = ["chunk", "file_meta", "file_data", "net_dial", "net_data", "net_ack",
               "net_close", "net_resolve", "bogus"]
ERROR_CODES = ["invalid_argument", "not_found", "timed_out", "output_too_large", "too_large",
               "not_regular_file", "output_not_retained", "not_empty", "permission_denied",
               "no_space", "io", "protocol", "made_up_code"]


def rnd_value(r, depth=0):
    k = r.randrange(8 if depth < 3 else 5)
    if k == 0:
        return r.randrange(-2**63, 2**64)
    if k == 1:
        return "".join(chr(r.randrange(1, 0x2FFF)) for _ in range(r.randrange(0, 40)))
    if k == 2:
        return r.random() * 1e300
    if k == 3:
        return None
    if k == 4:
        return r.choice([True, False])
    if k == 5:
        return [rnd_value(r, depth + 1) for _ in range(r.randrange(0, 5))]
    if k == 6:
        return {rnd_key(r): rnd_value(r, depth + 1) for _ in range(r.randrange(0, 5))}
    return "a" * r.randrange(0, 100000)


def rnd_key(r):
    return r.choice(["type", "id", "conn", "host", "port", "bytes", "query", "name", "ipv6",
                     "exit_code", "stdout_len", "stderr_len", "process", "processes", "chunks",
                     "chunk", "stat", "entries", "next_offset", "code", "message", "reset",
                     "offset", "len", "stream", "size", "mode", "kind"])


def rnd_msg(r, kinds):
    msg = {"type": r.choice(kinds)}
    for _ in range(r.randrange(0, 6)):
        msg[rnd_key(r)] = rnd_value(r)
    return msg


def net_event(r, i, flood_conn):
    t = r.choice(["net_dial", "net_dial", "net_data", "net_ack", "net_close", "net_resolve"])
    if t == "net_dial":
        msg = {"type": t, "conn": flood_conn if r.random() < 0.7 else r.randrange(2**64),
               "host": r.choice(["127.0.0.1", "localhost", "169.254.169.254", "::1",
                                 "x" * r.randrange(1, 300), "sbx-job.internal", ""]),
               "port": r.randrange(0, 65536)}
    elif t == "net_data":
        return frame({"id": i, "kind": "event", "msg": {"type": t, "conn": r.randrange(2**64)}},
                     os.urandom(r.randrange(0, 70000)))
    elif t == "net_ack":
        msg = {"type": t, "conn": r.randrange(2**64), "bytes": r.randrange(2**64)}
    elif t == "net_close":
        msg = {"type": t, "conn": r.randrange(2**64), "reset": r.random() < 0.5}
    else:
        msg = {"type": t, "query": r.randrange(2**64),
               "name": r.choice(["localhost", "a.invalid", "x" * r.randrange(1, 600), ""]),
               "ipv6": r.random() < 0.5}
    return frame({"id": i, "kind": "event", "msg": msg})


def mutate(r, raw):
    b = bytearray(raw)
    for _ in range(r.randrange(1, 6)):
        if not b:
            break
        op = r.randrange(4)
        pos = r.randrange(len(b))
        if op == 0:
            b[pos] = r.randrange(256)
        elif op == 1:
            del b[pos:pos + r.randrange(1, 16)]
        elif op == 2:
            b[pos:pos] = os.urandom(r.randrange(1, 16))
        else:
            b[pos] ^= 1 << r.randrange(8)
    return bytes(b)


def fuzz_answer(r, req_id, op, state):
    """Frames sent in answer to one request."""
    # Mostly answers that keep the connection up (so later requests are
    # fuzzed too); now and then one that breaks it (sbxd must close it).
    choice = r.choice([1, 1, 2, 2, 3, 3, 4, 4, 8, 11, 11, 12, 12, 0]) if r.random() < 0.85 \
        else r.choice([5, 6, 7, 9, 10, 13])
    ids = [req_id, req_id, r.randrange(2**64), 0]
    i = r.choice(ids)
    if op == "hello" and r.random() < 0.97:
        return [frame(hello(req_id))]
    if op == "net_serve" or choice == 0:
        return [net_event(r, req_id, state["flood_conn"]) for _ in range(r.randrange(1, 400))]
    if choice == 1:
        return [frame({"id": i, "kind": "reply", "msg": rnd_msg(r, REPLY_TYPES)})]
    if choice == 2:
        return [frame({"id": i, "kind": "error",
                       "msg": {"code": r.choice(ERROR_CODES), "message": rnd_value(r)}})]
    if choice == 3:
        return [frame({"id": i, "kind": "event", "msg": rnd_msg(r, EVENT_TYPES)},
                      os.urandom(r.randrange(0, 5000))) for _ in range(r.randrange(1, 50))]
    if choice == 4:
        return []  # silence: sbxd's deadline must answer the caller
    if choice == 5:
        return [mutate(r, frame({"id": i, "kind": "reply", "msg": {"type": "pong"}}))]
    if choice == 6:
        return [frame(os.urandom(r.randrange(0, 200)))]
    if choice == 7:
        return [frame({"id": i, "kind": r.choice(["request", "cancel", "weird", 7]),
                       "msg": rnd_value(r)})]
    if choice == 8:
        # A large, valid reply (payload near the frame limit).
        n = r.randrange(1, 4) * 1024 * 1024
        return [frame({"id": i, "kind": "reply",
                       "msg": {"type": "exec", "exit_code": 0, "stdout_len": n, "stderr_len": 0}},
                      b"\0" * n)]
    if choice == 9:
        # Wrong lengths: claims over the limit, or header longer than the frame.
        return [struct.pack(">II", r.choice([MAX_FRAME + 1, 2**32 - 1, 3, 5]),
                            r.randrange(2**32)) + os.urandom(r.randrange(0, 64))]
    if choice == 10:
        # Truncated frame, then nothing (sbxd's reader waits; the call's deadline answers).
        f = frame({"id": i, "kind": "reply", "msg": {"type": "ok"}})
        return [f[: r.randrange(1, len(f))]]
    if choice == 11:
        return [frame({"id": req_id, "kind": "reply", "msg": {"type": "ok"}})] * r.randrange(2, 20)
    if choice == 12:
        return [frame({"id": i, "kind": "reply",
                       "msg": {"type": "processes",
                               "processes": [rnd_value(r) for _ in range(r.randrange(0, 50))]}})]
    # Deep nesting (parser recursion limits).
    depth = r.randrange(1, 5000)
    return [frame(b'{"id":%d,"kind":"reply","msg":' % i + b"[" * depth + b"]" * depth + b"}")]


def run_fuzz(r):
    state = {"flood_conn": r.randrange(2**64)}
    deadline = time.time() + r.uniform(2, 15)

    def unsolicited():
        while time.time() < deadline:
            time.sleep(r.uniform(0, 0.2))
            send(r.choice(fuzz_answer(r, r.randrange(2**64), "x", state) or [b""]))
        os._exit(0)

    threading.Thread(target=unsolicited, daemon=True).start()
    while True:
        h = read_frame()
        if h is None:
            os._exit(0)
        req_id = h.get("id", 0) if isinstance(h, dict) else 0
        msg = h.get("msg") if isinstance(h, dict) else None
        op = msg.get("op") if isinstance(msg, dict) else None
        for raw in fuzz_answer(r, req_id if isinstance(req_id, int) else 0, op, state):
            send(raw)


def run_dialflood(target, count):
    host, port = target.rsplit(":", 1)
    while True:
        h = read_frame()
        if h is None:
            os._exit(0)
        req_id = h.get("id", 0)
        op = (h.get("msg") or {}).get("op")
        if op == "hello":
            send(frame(hello(req_id)))
        elif op == "ping":
            send(frame({"id": req_id, "kind": "reply", "msg": {"type": "pong"}}))
        elif op == "net_serve":
            for _ in range(count):
                send(frame({"id": req_id, "kind": "event",
                            "msg": {"type": "net_dial", "conn": 7, "host": host,
                                    "port": int(port)}}))
            sys.stderr.write("dialflood: sent %d dials with conn id 7\n" % count)
            # One flood per arming: the relay sbxd opens next is the real
            # agent's, so a test can see the sandbox recover.
            try:
                os.remove("/tmp/hostile-dialflood")
            except OSError:
                pass


def connection_seed():
    with open("/tmp/hostile-fuzz") as f:
        base = int(f.read().strip() or "0")
    n = 0
    try:
        with open("/tmp/hostile-fuzz-n") as f:
            n = int(f.read().strip() or "0")
    except (OSError, ValueError):
        pass
    with open("/tmp/hostile-fuzz-n", "w") as f:
        f.write(str(n + 1))
    return base + n


def main():
    if os.path.exists("/tmp/hostile-dialflood"):
        with open("/tmp/hostile-dialflood") as f:
            target, count = f.read().split()
        run_dialflood(target, int(count))
    else:
        run_fuzz(random.Random(connection_seed()))


main()
