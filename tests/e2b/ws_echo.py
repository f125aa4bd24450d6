# A WebSocket echo server in plain Python (the sandbox image has no
# `websockets` package): text and binary frames come back unchanged, ping
# gets pong, close gets close. Usage: python3 ws_echo.py PORT
import base64, hashlib, socket, struct, sys, threading

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def frame(op, data):
    head = bytes([0x80 | op])
    n = len(data)
    if n < 126:
        head += bytes([n])
    elif n < 65536:
        head += bytes([126]) + struct.pack(">H", n)
    else:
        head += bytes([127]) + struct.pack(">Q", n)
    return head + data


def handle(conn):
    f = conn.makefile("rb")
    key = None
    while True:
        line = f.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.decode("latin-1").partition(":")
        if name.strip().lower() == "sec-websocket-key":
            key = value.strip()
    if key is None:
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        conn.close()
        return
    accept = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
    conn.sendall(
        (
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n" % accept
        ).encode()
    )
    while True:
        head = f.read(2)
        if len(head) < 2:
            break
        op, n = head[0] & 0x0F, head[1] & 0x7F
        if n == 126:
            n = struct.unpack(">H", f.read(2))[0]
        elif n == 127:
            n = struct.unpack(">Q", f.read(8))[0]
        mask = f.read(4) if head[1] & 0x80 else b"\0\0\0\0"
        data = bytes(b ^ mask[i % 4] for i, b in enumerate(f.read(n)))
        if op == 8:
            conn.sendall(frame(8, data[:2]))
            break
        if op in (1, 2):
            conn.sendall(frame(op, data))
        elif op == 9:
            conn.sendall(frame(10, data))
    conn.close()


server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", int(sys.argv[1])))
server.listen(64)
print("listening", flush=True)
while True:
    c, _ = server.accept()
    threading.Thread(target=handle, args=(c,), daemon=True).start()
