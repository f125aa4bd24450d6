"""What envd_sync.py and envd_async.py share: the connection settings, the
output protocol (`ok   <step>`, `FAIL <step>: <error>`) and small checks."""

import asyncio
import os
import re
import sys
import time
import traceback
from contextlib import contextmanager
from datetime import timezone

HOME = "/home/user"


def connection_opts():
    """The SDK's connection settings from SBX_URL and SBX_KEY (contract §1.8)."""
    url = os.environ.get("SBX_URL")
    key = os.environ.get("SBX_KEY")
    if not url or not key:
        print("SBX_URL and SBX_KEY are required", file=sys.stderr)
        sys.exit(2)
    return dict(api_key=key, api_url=url, sandbox_url=url, request_timeout=180)


class StepFailure(Exception):
    def __init__(self, name, cause):
        super().__init__(f"{name}: {type(cause).__name__}: {cause}")
        self.name = name
        self.cause = cause


@contextmanager
def step(name):
    """`with step("name"):` prints `ok   name` when the block succeeds."""
    try:
        yield
    except StepFailure:
        raise
    except Exception as e:
        raise StepFailure(name, e) from e
    print(f"ok   {name}", flush=True)


def fail(e):
    """Prints the failure line (stdout) and its traceback (stderr)."""
    if isinstance(e, StepFailure):
        print(f"FAIL {e.name}: {type(e.cause).__name__}: {e.cause}", flush=True)
        traceback.print_exception(e.cause, file=sys.stderr)
    else:
        print(f"FAIL: {type(e).__name__}: {e}", flush=True)
        traceback.print_exception(e, file=sys.stderr)


def passed(what):
    """Prints `<what>: all steps passed` and ends the process at once, with
    status 0. Skipping the interpreter's finalization is deliberate: the
    SDK's native HTTP layer (pyqwest, Rust) sometimes aborts in it (SIGABRT,
    "Fatal Python error: Aborted" with no Python frame), seen about once in
    ten runs of envd_async.py on a loaded machine, after every step passed.
    That crash is the client library's, not the server's under test."""
    print(f"{what}: all steps passed", flush=True)
    sys.stderr.flush()
    os._exit(0)


def check(cond, what, detail=None):
    if not cond:
        raise AssertionError(what if detail is None else f"{what}: {detail!r}")


def eq(actual, expected, what):
    if actual != expected:
        raise AssertionError(f"{what}: got {actual!r}, want {expected!r}")


class raises:
    """`with raises(Cls, "what") as r:` — the block must raise Cls (kept in r.error)."""

    def __init__(self, cls, what):
        self.cls = cls
        self.what = what
        self.error = None

    def __enter__(self):
        return self

    def __exit__(self, et, e, tb):
        if e is None:
            raise AssertionError(f"{self.what}: did not raise {self.cls.__name__}")
        if not isinstance(e, self.cls):
            raise AssertionError(
                f"{self.what}: want {self.cls.__name__}, got {type(e).__name__}: {e}"
            ) from e
        self.error = e
        return True


def _timed_out(what, timeout):
    """what: a text, or a function making one (called at the timeout)."""
    return AssertionError(f"timed out after {timeout} s waiting for {what() if callable(what) else what}")


def check_busy_metric(m, vcpu=2, memory_mb=2048):
    """An E2B SandboxMetrics sample of a busy sandbox of the default E2B shape (2 vCPU, 2 GiB)."""
    check(m.cpu_used_pct > 0 and m.cpu_count == vcpu, "cpuUsedPct > 0 and cpuCount", m)
    check(0 < m.mem_used <= m.mem_total and m.mem_total == memory_mb << 20, "memUsed within memTotal", m)
    check(m.mem_cache >= 0 and m.disk_used >= 0 and m.disk_total >= 0, "memCache, diskUsed, diskTotal", m)


def utc(ts):
    """ts as an aware UTC datetime (the SDK's timestamps may be naive)."""
    return ts if ts.tzinfo else ts.replace(tzinfo=timezone.utc)


def wait_for(pred, what, timeout=15.0):
    """Polls pred() every 100 ms until it is true or timeout seconds pass."""
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise _timed_out(what, timeout)
        time.sleep(0.1)


async def await_for(pred, what, timeout=15.0):
    """wait_for for a coroutine function (or plain function) pred."""
    end = time.monotonic() + timeout
    while True:
        got = pred()
        if asyncio.iscoroutine(got):
            got = await got
        if got:
            return
        if time.monotonic() > end:
            raise _timed_out(what, timeout)
        await asyncio.sleep(0.1)


def perm_string(mode):
    """Go's FileMode.String() of the permission bits of a regular file."""
    bits = "rwxrwxrwx"
    return "-" + "".join(c if mode & (1 << (8 - i)) else "-" for i, c in enumerate(bits))


_OSC = re.compile(r"\x1b\][^\x07\x1b]*(\x07|\x1b\\)")
_CSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def terminal_text(raw):
    """A terminal's output without escape sequences (prompt colours, title,
    bracketed paste) and carriage returns."""
    return _CSI.sub("", _OSC.sub("", raw)).replace("\r", "")


# The timed-out command of both scripts, and what 1 MiB of `yes abcdefghi` is.
TIMEOUT_CMD = "sleep 10"
MIB_CMD = "yes abcdefghi | head -c 1048576"
MIB_OUT = ("abcdefghi\n" * 104858)[:1048576]
