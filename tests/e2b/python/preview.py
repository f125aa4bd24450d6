#!/usr/bin/env python3
"""Preview URLs with the real sync Python SDK: `sandbox.get_host(port)` over
HTTPS (sbxd with --e2b-domain sbx.test and its own CA) reaches
`python3 -m http.server` inside the sandbox.

    SBX_URL=https://localhost:PORT SBX_KEY=signkey-… SBX_CA=ca.pem \
    SSL_CERT_FILE=ca.pem .venv/bin/python preview.py

`*.sbx.test` is resolved to 127.0.0.1 here; the port is SBX_URL's. Prints
`ok   <step>` per step and `all steps passed`; at the first failure
`FAIL <step>: …`, kills the sandbox and exits 1.
"""

import os
import socket
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from e2b import Sandbox

from steps import check, connection_opts, eq, fail, passed, step

_real_getaddrinfo = socket.getaddrinfo


def _getaddrinfo(host, *args, **kwargs):
    # *.sbx.test is this machine (no wildcard DNS in a test).
    if isinstance(host, str) and host.endswith(".sbx.test"):
        host = "127.0.0.1"
    return _real_getaddrinfo(host, *args, **kwargs)


socket.getaddrinfo = _getaddrinfo
PORT = urllib.parse.urlparse(os.environ.get("SBX_URL", "")).port
CTX = ssl.create_default_context(cafile=os.environ.get("SBX_CA"))


def get(sbx, port, path, headers=None):
    url = f"https://{sbx.get_host(port)}:{PORT}{path}"
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, context=CTX, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def main():
    opts = connection_opts()
    sbx = None
    try:
        with step("get_host reaches python3 -m http.server over HTTPS"):
            sbx = Sandbox.create("base", **opts)
            eq(sbx.get_host(8000), f"8000-{sbx.sandbox_id}.sbx.test", "get_host")
            sbx.files.write("/home/user/www/hello.txt", "hello from python\n")
            sbx.commands.run("python3 -m http.server 8000", background=True, cwd="/home/user/www")
            deadline = time.time() + 30
            while True:
                status, body = get(sbx, 8000, "/hello.txt")
                if status != 502 or time.time() > deadline:
                    break
                time.sleep(0.2)
            eq((status, body), (200, b"hello from python\n"), "answer")
        with step("nothing listening: 502"):
            eq(get(sbx, 8001, "/")[0], 502, "status")
        with step("kill"):
            eq(sbx.kill(), True, "kill")
            sbx = None
        passed("e2b preview (python)")
    except Exception as e:
        fail(e)
        if sbx is not None:
            try:
                sbx.kill()
            except Exception:
                pass
        sys.exit(1)


main()
