#!/usr/bin/env python3
"""Drives sbxd's envd API (commands, PTYs, files, watch; contract §3-§5 of
protocol/e2b/README.md) with the real sync Python SDK (PyPI e2b 2.63.0, pinned
in requirements.txt), against one sandbox of the default image.

    SBX_URL=http://127.0.0.1:8731 SBX_KEY=signkey-sbx-… .venv/bin/python envd_sync.py

Prints `ok   <step>` per step and `all steps passed` at the end; at the first
failure prints `FAIL <step>: <error>`, kills the sandbox and exits 1.
"""

import re
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone

import httpx
from e2b import (
    AuthenticationException,
    CommandExitException,
    FileNotFoundException,
    FilesystemEventType,
    FileType,
    InvalidArgumentException,
    NotFoundException,
    PtySize,
    Sandbox,
    TimeoutException,
)

from steps import (
    HOME,
    MIB_CMD,
    MIB_OUT,
    TIMEOUT_CMD,
    check,
    check_busy_metric,
    connection_opts,
    eq,
    fail,
    passed,
    perm_string,
    raises,
    step,
    terminal_text,
    utc,
    wait_for,
)

OPTS = connection_opts()
DIR = f"{HOME}/envd-py-sync"


def listed(sbx, pid):
    return any(p.pid == pid for p in sbx.commands.list())


def read_until(handle, done, what):
    """Reads a background command's stdout (blocking) until done(all of it so far)."""
    buf = ""
    for out, _err, _pty in handle:
        buf += out or ""
        if done(buf):
            return buf
    raise AssertionError(f"the stream ended before {what}: {buf!r}")


class PtyReader:
    """Reads a PTY handle's output (blocking) until a pattern shows up."""

    def __init__(self, handle):
        self.handle = handle
        self.raw = b""

    def until(self, pattern, what):
        if re.search(pattern, terminal_text(self.raw.decode(errors="replace"))):
            return
        for _out, _err, pty in self.handle:
            self.raw += pty or b""
            if re.search(pattern, terminal_text(self.raw.decode(errors="replace"))):
                return
        raise AssertionError(f"the PTY ended before {what}: {self.raw[-300:]!r}")


# ---- commands -------------------------------------------------------------------


def commands(sbx):
    with step("commands.run: stdout/stderr callbacks and the result"):
        out, err = [], []
        r = sbx.commands.run(
            "echo out-1; echo err-1 >&2; echo out-2", on_stdout=out.append, on_stderr=err.append
        )
        eq(r.exit_code, 0, "exit_code")
        eq(r.stdout, "out-1\nout-2\n", "stdout")
        eq(r.stderr, "err-1\n", "stderr")
        eq("".join(out), r.stdout, "on_stdout chunks")
        eq("".join(err), r.stderr, "on_stderr chunks")

    with step("commands.run: a non-zero exit is CommandExitException"):
        with raises(CommandExitException, "exit 3") as r:
            sbx.commands.run("echo before; echo oops >&2; exit 3")
        eq(r.error.exit_code, 3, "exit_code")
        eq(r.error.stdout, "before\n", "stdout")
        eq(r.error.stderr, "oops\n", "stderr")
        check(r.error.error, "error is set", r.error.error)

    with step("commands.run: envs, the sandbox's envs and cwd"):
        r = sbx.commands.run('echo "$FOO|$SBX_CREATE_ENV|$(pwd)"', envs={"FOO": "bar"}, cwd="/tmp")
        eq(r.stdout, "bar|from-create|/tmp\n", "stdout")
        r = sbx.commands.run('echo "$SBX_CREATE_ENV"', envs={"SBX_CREATE_ENV": "per-call"})
        eq(r.stdout, "per-call\n", "per-call envs win over the sandbox's")

    with step("commands.run: the default user is user, home /home/user"):
        r = sbx.commands.run("whoami; echo $HOME; pwd; id -u; id -g")
        eq(r.stdout, f"user\n{HOME}\n{HOME}\n1000\n1000\n", "whoami, HOME, pwd, uid, gid")

    with step("commands.run: user root"):
        r = sbx.commands.run("whoami; echo $HOME; pwd", user="root")
        eq(r.stdout, "root\n/root\n/root\n", "whoami, HOME, pwd")

    # No sudo step: no_new_privs is set for every process in an sbx sandbox
    # (gVisor); user="root" is the way to root (docs/e2b.md).

    with step("commands.run: python, python3, git and bash are there"):
        r = sbx.commands.run("python --version; python3 --version; git --version; bash --version | head -1")
        lines = r.stdout.strip().split("\n")
        check(lines[0].startswith("Python 3.") and lines[0] == lines[1], "python is python3", lines)
        check(lines[2].startswith("git version") and "bash" in lines[3], "git and bash", lines)

    with step("commands.run: a missing cwd is InvalidArgumentException"):
        with raises(InvalidArgumentException, "missing cwd"):
            sbx.commands.run("pwd", cwd="/does/not/exist")

    with step("commands.run: timeout ends the command with TimeoutException"):
        started = time.monotonic()
        with raises(TimeoutException, "sleep 10 with 2 s"):
            sbx.commands.run(TIMEOUT_CMD, timeout=2)
        check(time.monotonic() - started < 8, "it took the timeout, not the sleep")

    with step("commands: the timed-out command was killed"):
        wait_for(
            lambda: not any(TIMEOUT_CMD in p.args for p in sbx.commands.list()),
            f"`{TIMEOUT_CMD}` to leave commands.list()",
        )

    with step("commands.run: an unknown user is AuthenticationException"):
        with raises(AuthenticationException, "user no-such-user"):
            sbx.commands.run("true", user="no-such-user")

    with step("commands.run: 1 MiB of output arrives whole"):
        r = sbx.commands.run(MIB_CMD)
        eq(len(r.stdout), len(MIB_OUT), "stdout length")
        check(r.stdout == MIB_OUT, "stdout content")


def background(sbx):
    with step("commands.run background with stdin"):
        h = sbx.commands.run("cat", background=True, stdin=True, envs={"BG": "1"}, cwd="/tmp")
        check(isinstance(h.pid, int) and h.pid > 0, "pid", h.pid)

    with step("commands.list shows it with its config"):
        procs = sbx.commands.list()
        p = next((x for x in procs if x.pid == h.pid), None)
        check(p is not None, "pid in list", procs)
        eq(p.cmd, "/bin/bash", "cmd")
        eq(p.args, ["-l", "-c", "cat"], "args")
        eq(p.envs.get("BG"), "1", "envs BG")
        eq(p.cwd, "/tmp", "cwd")
        # The SDK cannot set a tag on commands, so none is expected here.
        check(p.tag is None or isinstance(p.tag, str), "tag", p.tag)

    with step("send_stdin reaches the background command"):
        h.send_stdin("hello stdin\n")
        sbx.commands.send_stdin(h.pid, b"bytes too\n")
        read_until(h, lambda s: s == "hello stdin\nbytes too\n", "cat echoes both lines")

    with step("commands.stream_input sends chunks in order"):
        sbx.commands.stream_input(h.pid, ["chunk 1\n", b"chunk 2\n", "chunk 3\n"])
        read_until(h, lambda s: s == "chunk 1\nchunk 2\nchunk 3\n", "the streamed chunks")

    with step("close_stdin ends it (EOF) with exit code 0"):
        h.close_stdin()
        r = h.wait()
        eq(r.exit_code, 0, "exit_code")
        eq(r.stdout, "hello stdin\nbytes too\nchunk 1\nchunk 2\nchunk 3\n", "stdout")
        check(not listed(sbx, h.pid), "gone from list")

    with step("kill: True for a running command, then False"):
        k = sbx.commands.run("sleep 300", background=True)
        eq(k.kill(), True, "kill")
        with raises(CommandExitException, "wait after kill"):
            k.wait()
        wait_for(lambda: not listed(sbx, k.pid), "the killed pid to leave the list")
        eq(sbx.commands.kill(k.pid), False, "kill of the dead pid")
        eq(sbx.commands.kill(999_999), False, "kill of an unknown pid")

    with step("commands.connect to an unknown pid is NotFoundException"):
        with raises(NotFoundException, "connect 999999"):
            sbx.commands.connect(999_999)

    # disconnect keeps the process; a second client connects and sees only new output.
    with step("a background read loop answers its input"):
        loop = sbx.commands.run('while read l; do echo "got:$l"; done', background=True, stdin=True)
        loop.send_stdin("one\n")
        read_until(loop, lambda s: s == "got:one\n", "got:one")

    with step("disconnect does not kill the command"):
        loop.disconnect()
        time.sleep(0.5)
        check(listed(sbx, loop.pid), "still listed after disconnect")

    with step("commands.connect from a second client sees the output made after it"):
        other = Sandbox.connect(sbx.sandbox_id, **OPTS)
        h2 = other.commands.connect(loop.pid)
        eq(h2.pid, loop.pid, "pid")
        sbx.commands.send_stdin(loop.pid, "two\n")
        other.commands.close_stdin(loop.pid)
        r = h2.wait()
        eq(r.exit_code, 0, "exit_code")
        eq(r.stdout, "got:two\n", "only output produced after connecting")


# ---- PTY -------------------------------------------------------------------------


def pty(sbx):
    with step("pty.create runs an interactive bash"):
        t = sbx.pty.create(PtySize(rows=24, cols=80))
        check(isinstance(t.pid, int) and t.pid > 0, "pid", t.pid)
        reader = PtyReader(t)

    with step("pty.send_stdin: the command runs and its output arrives"):
        sbx.pty.send_stdin(t.pid, b"echo hi-from-pty\n")
        # The echoed input line is "echo hi-from-pty"; the output is the line alone.
        reader.until(r"(^|\n)hi-from-pty\n", "hi-from-pty on its own line")

    with step("pty: the terminal is 80x24 and runs as user"):
        sbx.pty.send_stdin(t.pid, b"stty size; whoami\n")
        reader.until(r"(^|\n)24 80\nuser\n", '"24 80" and "user"')

    with step("pty.resize to 100x30: stty size prints 30 100"):
        sbx.pty.resize(t.pid, PtySize(rows=30, cols=100))
        sbx.pty.send_stdin(t.pid, b"stty size\n")
        reader.until(r"(^|\n)30 100\n", '"30 100"')

    with step("pty.stream_input sends chunks in order"):
        sbx.pty.stream_input(t.pid, [b"echo stream", "ed-", b"input\n"])
        reader.until(r"(^|\n)streamed-input\n", "streamed-input")

    with step("pty: exit ends it with exit code 0"):
        sbx.pty.send_stdin(t.pid, b"exit\n")
        eq(t.wait().exit_code, 0, "exit_code")

    with step("pty.kill: True, then False"):
        k = sbx.pty.create(PtySize(rows=24, cols=80))
        eq(sbx.pty.kill(k.pid), True, "kill")
        with raises(CommandExitException, "wait after kill"):
            k.wait()
        wait_for(lambda: not listed(sbx, k.pid), "the killed pty to leave the list")
        eq(sbx.pty.kill(k.pid), False, "kill again")


# ---- files -------------------------------------------------------------------------


def files(sbx):
    with step("files.write text (parents created)"):
        info = sbx.files.write(f"{DIR}/a.txt", "hello text\n")
        eq((info.name, info.type, info.path), ("a.txt", FileType.FILE, f"{DIR}/a.txt"), "name, type, path")
        eq(sbx.files.read(f"{DIR}/a.txt"), "hello text\n", "read back")

    with step("files.write a relative path lands in /home/user"):
        eq(sbx.files.write("envd-py-sync-rel.txt", "rel").path, f"{HOME}/envd-py-sync-rel.txt", "path")
        eq(sbx.commands.run("cat envd-py-sync-rel.txt").stdout, "rel", "the same file for a command")

    data = bytes([0, 1, 2, 127, 128, 254, 255, 10])
    with step("files.write bytes, read as bytes and as a stream"):
        sbx.files.write(f"{DIR}/bytes.bin", data)
        eq(bytes(sbx.files.read(f"{DIR}/bytes.bin", format="bytes")), data, "bytes")
        eq(b"".join(sbx.files.read(f"{DIR}/bytes.bin", format="stream")), data, "stream")

    with step("files.write_files: several files at once"):
        infos = sbx.files.write_files(
            [{"path": f"{DIR}/m1.txt", "data": "one"}, {"path": f"{DIR}/sub/m2.txt", "data": b"two"}]
        )
        eq(sorted(i.path for i in infos), [f"{DIR}/m1.txt", f"{DIR}/sub/m2.txt"], "paths")
        eq(sbx.files.read(f"{DIR}/m1.txt"), "one", "m1")
        eq(sbx.files.read(f"{DIR}/sub/m2.txt"), "two", "m2")

    with step("files.write with gzip (octet-stream, Content-Encoding: gzip)"):
        content = "gzipped " * 1000
        eq(sbx.files.write(f"{DIR}/gz.txt", content, gzip=True).path, f"{DIR}/gz.txt", "path")
        eq(sbx.files.read(f"{DIR}/gz.txt"), content, "read back")
        eq(sbx.files.read(f"{DIR}/gz.txt", gzip=True), content, "read back with gzip")

    with step("files.write an iterable of chunks (streamed octet-stream)"):
        sbx.files.write(f"{DIR}/stream.txt", iter([b"stream-", b"ed ", b"content"]))
        eq(sbx.files.read(f"{DIR}/stream.txt"), "stream-ed content", "read back")

    with step("files.read of a missing file is FileNotFoundException"):
        with raises(FileNotFoundException, "read missing"):
            sbx.files.read(f"{DIR}/missing.txt")

    with step("files.get_info: type, size, owner, permissions, mtime"):
        i = sbx.files.get_info(f"{DIR}/a.txt")
        eq((i.name, i.type, i.path, i.size), ("a.txt", FileType.FILE, f"{DIR}/a.txt", 11), "name, type, path, size")
        eq((i.owner, i.group), ("user", "user"), "owner, group")
        eq(i.permissions, perm_string(i.mode & 0o777), "permissions match mode")
        check(i.mode & 0o600 == 0o600, "owner can read and write", oct(i.mode))
        age = abs((datetime.now(timezone.utc) - i.modified_time).total_seconds())
        check(age < 600, "modified_time is recent", i.modified_time)
        d = sbx.files.get_info(DIR)
        eq((d.type, d.owner), (FileType.DIR, "user"), "the created parent: a dir of user")

    with step("files.write metadata: user.e2b.* xattrs, in get_info and list, replaced by the next upload"):
        path = "/home/user/envd-py-meta.txt"
        w = sbx.files.write(path, "m", metadata={"Owner": "me", "build.id": "42"})
        eq(w.metadata, {"build.id": "42", "owner": "me"}, "the write's answer (keys lower-cased)")
        eq((sbx.files.get_info(path)).metadata, {"build.id": "42", "owner": "me"}, "get_info")
        listed = [e for e in sbx.files.list("/home/user") if e.path == path]
        eq([e.metadata for e in listed], [{"build.id": "42", "owner": "me"}], "list")
        sbx.files.write(path, "n", metadata={"other": "x"})
        eq((sbx.files.get_info(path)).metadata, {"other": "x"}, "a new upload replaces the keys")
        sbx.files.write(path, "o")
        check(not (sbx.files.get_info(path)).metadata, "an upload without metadata clears it")

    with step("files.write as root makes root's file"):
        eq(sbx.files.write("/root/envd-py-root.txt", "r", user="root").path, "/root/envd-py-root.txt", "path")
        eq(sbx.files.get_info("/root/envd-py-root.txt", user="root").owner, "root", "owner")
        eq(sbx.files.write("rel-root-sync.txt", "r", user="root").path, "/root/rel-root-sync.txt", "root's relative path")

    with step("files.list depth 1 and 2"):
        one = sbx.files.list(DIR)
        eq(sorted(e.name for e in one), ["a.txt", "bytes.bin", "gz.txt", "m1.txt", "stream.txt", "sub"], "depth 1 names")
        sub = next(e for e in one if e.name == "sub")
        eq((sub.type, sub.path), (FileType.DIR, f"{DIR}/sub"), "sub entry")
        two = sbx.files.list(DIR, depth=2)
        paths = sorted(e.path for e in two)
        check(f"{DIR}/sub/m2.txt" in paths and f"{DIR}/a.txt" in paths, "depth 2 has sub/m2.txt", paths)
        eq(len(two), 7, "depth 2 count")

    with step("files.exists: True and False"):
        eq(sbx.files.exists(f"{DIR}/a.txt"), True, "a.txt")
        eq(sbx.files.exists(DIR), True, "the dir")
        eq(sbx.files.exists(f"{DIR}/missing.txt"), False, "missing")

    with step("files.make_dir: True, then False when it exists"):
        eq(sbx.files.make_dir(f"{DIR}/made/deep"), True, "first")
        eq(sbx.files.make_dir(f"{DIR}/made/deep"), False, "again")
        i = sbx.files.get_info(f"{DIR}/made/deep")
        eq((i.type, i.owner), (FileType.DIR, "user"), "a dir of user")

    with step("commands.run: a relative cwd resolves against home"):
        eq(sbx.commands.run("pwd", cwd="envd-py-sync/made").stdout, f"{DIR}/made\n", "pwd")

    with step("files.rename"):
        e = sbx.files.rename(f"{DIR}/a.txt", f"{DIR}/renamed/a2.txt")
        eq((e.name, e.path, e.type), ("a2.txt", f"{DIR}/renamed/a2.txt", FileType.FILE), "entry")
        eq(sbx.files.exists(f"{DIR}/a.txt"), False, "old path")
        eq(sbx.files.read(f"{DIR}/renamed/a2.txt"), "hello text\n", "content")

    with step("files.remove a file and a directory tree"):
        sbx.files.remove(f"{DIR}/renamed/a2.txt")
        eq(sbx.files.exists(f"{DIR}/renamed/a2.txt"), False, "file")
        sbx.files.remove(f"{DIR}/made")
        eq(sbx.files.exists(f"{DIR}/made"), False, "tree")

    with step("files.watch_dir (recursive) + get_new_events: create, write, remove"):
        sbx.files.make_dir(f"{DIR}/watch/sub")
        w = sbx.files.watch_dir(f"{DIR}/watch", recursive=True)
        events = []
        try:
            sbx.commands.run(
                f"echo hi > {DIR}/watch/sub/w.txt && echo top > {DIR}/watch/top.txt && rm {DIR}/watch/sub/w.txt"
            )
            want = {
                ("sub/w.txt", FilesystemEventType.CREATE),
                ("sub/w.txt", FilesystemEventType.WRITE),
                ("sub/w.txt", FilesystemEventType.REMOVE),
                ("top.txt", FilesystemEventType.CREATE),
            }

            def seen_all():
                events.extend(w.get_new_events())
                return want <= {(e.name, e.type) for e in events}

            wait_for(seen_all, lambda: f"the events (got {events})")
            # get_new_events returns what is new: drained, then nothing happens.
            time.sleep(1)
            w.get_new_events()
            eq(w.get_new_events(), [], "events after the last call")
        finally:
            w.stop()

    with step("files.watch_dir of a missing directory is FileNotFoundException"):
        with raises(FileNotFoundException, "watch missing"):
            sbx.files.watch_dir(f"{DIR}/no-such-dir")


# ---- the sandbox ----------------------------------------------------------------------


def sandbox(sbx):
    with step("is_running: True"):
        eq(sbx.is_running(), True, "is_running")

    # Usage (GET /sandboxes/{id}/metrics): sbxd samples every few seconds; a
    # sample taken while a busy loop runs shows it (polled within a deadline).
    with step("get_metrics: a sample of the busy sandbox (CPU, memory, disk)"):
        check(isinstance(sbx.get_metrics(), list), "get_metrics returns a list")
        busy = sbx.commands.run("while :; do :; done", background=True)
        since = datetime.now(timezone.utc).replace(microsecond=0)
        found = []

        def sampled():
            found[:] = [m for m in sbx.get_metrics(start=since) if m.cpu_used_pct > 0 and utc(m.timestamp) >= since]
            return bool(found)

        wait_for(sampled, "a sample with CPU in use", timeout=60)
        check_busy_metric(found[-1])
        eq(busy.kill(), True, "kill the busy loop")

    with step("get_metrics: by sandbox id; a start in the future selects none"):
        by_id = Sandbox.get_metrics(sbx.sandbox_id, **OPTS)
        check(len(by_id) > 0 and all(m.mem_total == 2048 << 20 for m in by_id), "by id", by_id)
        eq(sbx.get_metrics(start=datetime.now(timezone.utc) + timedelta(hours=1)), [], "future start")

    with step("get_host(port) names the sandbox"):
        host = sbx.get_host(8080)
        check(sbx.sandbox_id in host and host.startswith("8080-"), "host", host)

    # Pre-signed URLs: signed with the envdAccessToken; with sandbox_url they are
    # SBX_URL/files?path=…&signature=… (no sandbox id, no headers: §1.5, §3.6).
    with step("download_url: a plain GET gets the file"):
        sbx.files.write(f"{DIR}/dl.txt", "download me")
        link = sbx.download_url(f"{DIR}/dl.txt")
        check("signature=" in link, "signed", link)
        with urllib.request.urlopen(link, timeout=60) as res:
            eq(res.status, 200, "status")
            eq(res.read(), b"download me", "body")

    with step("download_url: a bad signature is 401"):
        link = re.sub(r"signature=[^&]+", "signature=v1_bad", sbx.download_url(f"{DIR}/dl.txt"))
        with raises(urllib.error.HTTPError, "bad signature") as r:
            urllib.request.urlopen(link, timeout=60)
        eq(r.error.code, 401, "status")
        check(b"download me" not in r.error.read(), "no content")

    with step("upload_url: a plain multipart POST writes the file"):
        path = f"{DIR}/ul.txt"
        link = sbx.upload_url(path, use_signature_expiration=120)
        res = httpx.post(link, files={"file": (path, b"uploaded via url")}, timeout=60)
        eq(res.status_code, 200, "status")
        eq(sbx.files.read(path), "uploaded via url", "content")
        eq(sbx.files.get_info(path).owner, "user", "owner")


# Preview URLs (getHost) are driven by preview.mjs / python/preview.py (tests/e2b_preview.rs).


def main():
    sbx = None
    try:
        with step("Sandbox.create"):
            sbx = Sandbox.create("base", timeout=600, envs={"SBX_CREATE_ENV": "from-create"}, **OPTS)
        commands(sbx)
        background(sbx)
        pty(sbx)
        files(sbx)
        sandbox(sbx)
        with step("kill"):
            eq(sbx.kill(), True, "kill")
            sbx = None
    except Exception as e:
        fail(e)
        if sbx is not None:
            try:
                sbx.kill()
            except Exception:
                pass
        sys.exit(1)
    passed("e2b envd (python sync)")


if __name__ == "__main__":
    main()
