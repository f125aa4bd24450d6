#!/usr/bin/env python3
"""Drives sbxd's envd API (commands, PTYs, files, watch; contract §3-§5 of
protocol/e2b/README.md) with the real async Python SDK (PyPI e2b 2.63.0,
pinned in requirements.txt), against one sandbox of the default image. Where
the sync client polls, this one uses callbacks (on_stdout, on_data, watch_dir's
on_event) and the long-lived StreamInput handle (commands.stream_input).

    SBX_URL=http://127.0.0.1:8731 SBX_KEY=signkey-sbx-… .venv/bin/python envd_async.py

Prints `ok   <step>` per step and `all steps passed` at the end; at the first
failure prints `FAIL <step>: <error>`, kills the sandbox and exits 1.
"""

import asyncio
import re
import sys
import time
from datetime import datetime, timedelta, timezone

import httpx
from e2b import (
    AsyncSandbox,
    AuthenticationException,
    CommandExitException,
    FileNotFoundException,
    FilesystemEventType,
    FileType,
    InvalidArgumentException,
    NotFoundException,
    PtySize,
    TimeoutException,
)

from steps import (
    HOME,
    MIB_CMD,
    MIB_OUT,
    TIMEOUT_CMD,
    await_for,
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
)

OPTS = connection_opts()
DIR = f"{HOME}/envd-py-async"


async def listed(sbx, pid):
    return any(p.pid == pid for p in await sbx.commands.list())


async def not_listed(sbx, pid):
    return not await listed(sbx, pid)


# ---- commands -------------------------------------------------------------------


async def commands(sbx):
    with step("commands.run: stdout/stderr callbacks and the result"):
        out, err = [], []
        r = await sbx.commands.run(
            "echo out-1; echo err-1 >&2; echo out-2", on_stdout=out.append, on_stderr=err.append
        )
        eq(r.exit_code, 0, "exit_code")
        eq(r.stdout, "out-1\nout-2\n", "stdout")
        eq(r.stderr, "err-1\n", "stderr")
        eq("".join(out), r.stdout, "on_stdout chunks")
        eq("".join(err), r.stderr, "on_stderr chunks")

    with step("commands.run: a non-zero exit is CommandExitException"):
        with raises(CommandExitException, "exit 3") as r:
            await sbx.commands.run("echo before; echo oops >&2; exit 3")
        eq(r.error.exit_code, 3, "exit_code")
        eq(r.error.stdout, "before\n", "stdout")
        eq(r.error.stderr, "oops\n", "stderr")
        check(r.error.error, "error is set", r.error.error)

    with step("commands.run: envs, the sandbox's envs and cwd"):
        r = await sbx.commands.run('echo "$FOO|$SBX_CREATE_ENV|$(pwd)"', envs={"FOO": "bar"}, cwd="/tmp")
        eq(r.stdout, "bar|from-create|/tmp\n", "stdout")
        r = await sbx.commands.run('echo "$SBX_CREATE_ENV"', envs={"SBX_CREATE_ENV": "per-call"})
        eq(r.stdout, "per-call\n", "per-call envs win over the sandbox's")

    with step("commands.run: the default user is user, home /home/user"):
        r = await sbx.commands.run("whoami; echo $HOME; pwd; id -u; id -g")
        eq(r.stdout, f"user\n{HOME}\n{HOME}\n1000\n1000\n", "whoami, HOME, pwd, uid, gid")

    with step("commands.run: user root"):
        r = await sbx.commands.run("whoami; echo $HOME; pwd", user="root")
        eq(r.stdout, "root\n/root\n/root\n", "whoami, HOME, pwd")

    # No sudo step: no_new_privs is set for every process in an sbx sandbox
    # (gVisor); user="root" is the way to root (docs/e2b.md).

    with step("commands.run: python, python3, git and bash are there"):
        r = await sbx.commands.run("python --version; python3 --version; git --version; bash --version | head -1")
        lines = r.stdout.strip().split("\n")
        check(lines[0].startswith("Python 3.") and lines[0] == lines[1], "python is python3", lines)
        check(lines[2].startswith("git version") and "bash" in lines[3], "git and bash", lines)

    with step("commands.run: a missing cwd is InvalidArgumentException"):
        with raises(InvalidArgumentException, "missing cwd"):
            await sbx.commands.run("pwd", cwd="/does/not/exist")

    with step("commands.run: timeout ends the command with TimeoutException"):
        started = time.monotonic()
        with raises(TimeoutException, "sleep 10 with 2 s"):
            await sbx.commands.run(TIMEOUT_CMD, timeout=2)
        check(time.monotonic() - started < 8, "it took the timeout, not the sleep")

    with step("commands: the timed-out command was killed"):

        async def gone():
            return not any(TIMEOUT_CMD in p.args for p in await sbx.commands.list())

        await await_for(gone, f"`{TIMEOUT_CMD}` to leave commands.list()")

    with step("commands.run: an unknown user is AuthenticationException"):
        with raises(AuthenticationException, "user no-such-user"):
            await sbx.commands.run("true", user="no-such-user")

    with step("commands.run: 1 MiB of output arrives whole"):
        r = await sbx.commands.run(MIB_CMD)
        eq(len(r.stdout), len(MIB_OUT), "stdout length")
        check(r.stdout == MIB_OUT, "stdout content")


async def background(sbx):
    out = []
    with step("commands.run background with stdin"):
        h = await sbx.commands.run(
            "cat", background=True, stdin=True, envs={"BG": "1"}, cwd="/tmp", on_stdout=out.append
        )
        check(isinstance(h.pid, int) and h.pid > 0, "pid", h.pid)
        eq(h.exit_code, None, "exit_code while running")

    with step("commands.list shows it with its config"):
        procs = await sbx.commands.list()
        p = next((x for x in procs if x.pid == h.pid), None)
        check(p is not None, "pid in list", procs)
        eq(p.cmd, "/bin/bash", "cmd")
        eq(p.args, ["-l", "-c", "cat"], "args")
        eq(p.envs.get("BG"), "1", "envs BG")
        eq(p.cwd, "/tmp", "cwd")
        # The SDK cannot set a tag on commands, so none is expected here.
        check(p.tag is None or isinstance(p.tag, str), "tag", p.tag)

    with step("send_stdin reaches the background command"):
        await h.send_stdin("hello stdin\n")
        await sbx.commands.send_stdin(h.pid, b"bytes too\n")
        await await_for(lambda: "".join(out) == "hello stdin\nbytes too\n", "cat to echo both lines")

    with step("commands.stream_input: each chunk is delivered before the stream ends"):
        # StreamInput is a client stream (contract §3.2): the server must pass
        # input on as it arrives, not when the request body ends.
        si = sbx.commands.stream_input(h.pid)
        await si.send("chunk 1\n")
        await await_for(lambda: "".join(out).endswith("chunk 1\n"), "chunk 1 while the stream is open")
        await si.send(b"chunk 2\n")
        await si.send("chunk 3\n")
        await si.close()
        await await_for(lambda: "".join(out).endswith("chunk 1\nchunk 2\nchunk 3\n"), "chunks 2 and 3 in order")

    with step("close_stdin ends it (EOF) with exit code 0"):
        await h.close_stdin()
        r = await h.wait()
        eq(r.exit_code, 0, "exit_code")
        eq(r.stdout, "hello stdin\nbytes too\nchunk 1\nchunk 2\nchunk 3\n", "stdout")
        check(await not_listed(sbx, h.pid), "gone from list")

    with step("kill: True for a running command, then False"):
        k = await sbx.commands.run("sleep 300", background=True)
        eq(await k.kill(), True, "kill")
        with raises(CommandExitException, "wait after kill"):
            await k.wait()
        await await_for(lambda: not_listed(sbx, k.pid), "the killed pid to leave the list")
        eq(await sbx.commands.kill(k.pid), False, "kill of the dead pid")
        eq(await sbx.commands.kill(999_999), False, "kill of an unknown pid")

    with step("commands.connect to an unknown pid is NotFoundException"):
        with raises(NotFoundException, "connect 999999"):
            await sbx.commands.connect(999_999)

    # disconnect keeps the process; a second client connects and sees only new output.
    first = []
    with step("a background read loop answers its input"):
        loop = await sbx.commands.run(
            'while read l; do echo "got:$l"; done', background=True, stdin=True, on_stdout=first.append
        )
        await loop.send_stdin("one\n")
        await await_for(lambda: "".join(first) == "got:one\n", "got:one")

    with step("disconnect does not kill the command"):
        await loop.disconnect()
        await asyncio.sleep(0.5)
        check(await listed(sbx, loop.pid), "still listed after disconnect")

    with step("commands.connect from a second client sees the output made after it"):
        other = await AsyncSandbox.connect(sbx.sandbox_id, **OPTS)
        second = []
        h2 = await other.commands.connect(loop.pid, on_stdout=second.append)
        eq(h2.pid, loop.pid, "pid")
        await sbx.commands.send_stdin(loop.pid, "two\n")
        await await_for(lambda: "got:two\n" in "".join(second), "got:two on the connected handle")
        await other.commands.close_stdin(loop.pid)
        r = await h2.wait()
        eq(r.exit_code, 0, "exit_code")
        eq(r.stdout, "got:two\n", "only output produced after connecting")
        eq("".join(first), "got:one\n", "nothing reached the disconnected handle")


# ---- PTY -------------------------------------------------------------------------


async def pty(sbx):
    raw = bytearray()

    def sees(pattern, what):
        return await_for(
            lambda: re.search(pattern, terminal_text(raw.decode(errors="replace"))),
            lambda: f"{what} (pty output so far: {bytes(raw[-300:])!r})",
        )

    with step("pty.create runs an interactive bash"):
        t = await sbx.pty.create(PtySize(rows=24, cols=80), on_data=raw.extend)
        check(isinstance(t.pid, int) and t.pid > 0, "pid", t.pid)

    with step("pty.send_stdin: the command runs and its output arrives in on_data"):
        await sbx.pty.send_stdin(t.pid, b"echo hi-from-pty\n")
        # The echoed input line is "echo hi-from-pty"; the output is the line alone.
        await sees(r"(^|\n)hi-from-pty\n", "hi-from-pty on its own line")

    with step("pty: the terminal is 80x24 and runs as user"):
        await sbx.pty.send_stdin(t.pid, b"stty size; whoami\n")
        await sees(r"(^|\n)24 80\nuser\n", '"24 80" and "user"')

    with step("pty.resize to 100x30: stty size prints 30 100"):
        await sbx.pty.resize(t.pid, PtySize(rows=30, cols=100))
        await sbx.pty.send_stdin(t.pid, b"stty size\n")
        await sees(r"(^|\n)30 100\n", '"30 100"')

    with step("pty.stream_input sends chunks in order"):
        async with sbx.pty.stream_input(t.pid) as si:
            await si.send(b"echo stream")
            await si.send("ed-")
            await si.send(b"input\n")
        await sees(r"(^|\n)streamed-input\n", "streamed-input")

    with step("pty: exit ends it with exit code 0"):
        await sbx.pty.send_stdin(t.pid, b"exit\n")
        eq((await t.wait()).exit_code, 0, "exit_code")

    with step("pty.kill: True, then False"):
        k = await sbx.pty.create(PtySize(rows=24, cols=80), on_data=lambda _: None)
        eq(await sbx.pty.kill(k.pid), True, "kill")
        with raises(CommandExitException, "wait after kill"):
            await k.wait()
        await await_for(lambda: not_listed(sbx, k.pid), "the killed pty to leave the list")
        eq(await sbx.pty.kill(k.pid), False, "kill again")


# ---- files -------------------------------------------------------------------------


async def chunks(*parts):
    for p in parts:
        yield p


async def files(sbx):
    fs = sbx.files
    with step("files.write text (parents created)"):
        info = await fs.write(f"{DIR}/a.txt", "hello text\n")
        eq((info.name, info.type, info.path), ("a.txt", FileType.FILE, f"{DIR}/a.txt"), "name, type, path")
        eq(await fs.read(f"{DIR}/a.txt"), "hello text\n", "read back")

    with step("files.write a relative path lands in /home/user"):
        eq((await fs.write("envd-py-async-rel.txt", "rel")).path, f"{HOME}/envd-py-async-rel.txt", "path")
        eq((await sbx.commands.run("cat envd-py-async-rel.txt")).stdout, "rel", "the same file for a command")

    data = bytes([0, 1, 2, 127, 128, 254, 255, 10])
    with step("files.write bytes, read as bytes and as a stream"):
        await fs.write(f"{DIR}/bytes.bin", data)
        eq(bytes(await fs.read(f"{DIR}/bytes.bin", format="bytes")), data, "bytes")
        got = b"".join([c async for c in await fs.read(f"{DIR}/bytes.bin", format="stream")])
        eq(got, data, "stream")

    with step("files.write_files: several files at once"):
        infos = await fs.write_files(
            [{"path": f"{DIR}/m1.txt", "data": "one"}, {"path": f"{DIR}/sub/m2.txt", "data": b"two"}]
        )
        eq(sorted(i.path for i in infos), [f"{DIR}/m1.txt", f"{DIR}/sub/m2.txt"], "paths")
        eq(await fs.read(f"{DIR}/m1.txt"), "one", "m1")
        eq(await fs.read(f"{DIR}/sub/m2.txt"), "two", "m2")

    with step("files.write with gzip (octet-stream, Content-Encoding: gzip)"):
        content = "gzipped " * 1000
        eq((await fs.write(f"{DIR}/gz.txt", content, gzip=True)).path, f"{DIR}/gz.txt", "path")
        eq(await fs.read(f"{DIR}/gz.txt"), content, "read back")
        eq(await fs.read(f"{DIR}/gz.txt", gzip=True), content, "read back with gzip")

    with step("files.write an async iterable of chunks (streamed octet-stream)"):
        await fs.write(f"{DIR}/stream.txt", chunks(b"stream-", b"ed ", b"content"))
        eq(await fs.read(f"{DIR}/stream.txt"), "stream-ed content", "read back")

    with step("files.read of a missing file is FileNotFoundException"):
        with raises(FileNotFoundException, "read missing"):
            await fs.read(f"{DIR}/missing.txt")

    with step("files.get_info: type, size, owner, permissions, mtime"):
        i = await fs.get_info(f"{DIR}/a.txt")
        eq((i.name, i.type, i.path, i.size), ("a.txt", FileType.FILE, f"{DIR}/a.txt", 11), "name, type, path, size")
        eq((i.owner, i.group), ("user", "user"), "owner, group")
        eq(i.permissions, perm_string(i.mode & 0o777), "permissions match mode")
        check(i.mode & 0o600 == 0o600, "owner can read and write", oct(i.mode))
        age = abs((datetime.now(timezone.utc) - i.modified_time).total_seconds())
        check(age < 600, "modified_time is recent", i.modified_time)
        d = await fs.get_info(DIR)
        eq((d.type, d.owner), (FileType.DIR, "user"), "the created parent: a dir of user")

    with step("files.write metadata: user.e2b.* xattrs, in get_info and list, replaced by the next upload"):
        path = "/home/user/envd-py-async-meta.txt"
        w = await sbx.files.write(path, "m", metadata={"Owner": "me", "build.id": "42"})
        eq(w.metadata, {"build.id": "42", "owner": "me"}, "the write's answer (keys lower-cased)")
        eq((await sbx.files.get_info(path)).metadata, {"build.id": "42", "owner": "me"}, "get_info")
        listed = [e for e in await sbx.files.list("/home/user") if e.path == path]
        eq([e.metadata for e in listed], [{"build.id": "42", "owner": "me"}], "list")
        await sbx.files.write(path, "n", metadata={"other": "x"})
        eq((await sbx.files.get_info(path)).metadata, {"other": "x"}, "a new upload replaces the keys")
        await sbx.files.write(path, "o")
        check(not (await sbx.files.get_info(path)).metadata, "an upload without metadata clears it")

    with step("files.write as root makes root's file"):
        eq((await fs.write("/root/envd-py-root-a.txt", "r", user="root")).path, "/root/envd-py-root-a.txt", "path")
        eq((await fs.get_info("/root/envd-py-root-a.txt", user="root")).owner, "root", "owner")
        rel = await fs.write("rel-root-async.txt", "r", user="root")
        eq(rel.path, "/root/rel-root-async.txt", "root's relative path")

    with step("files.list depth 1 and 2"):
        one = await fs.list(DIR)
        eq(sorted(e.name for e in one), ["a.txt", "bytes.bin", "gz.txt", "m1.txt", "stream.txt", "sub"], "depth 1 names")
        sub = next(e for e in one if e.name == "sub")
        eq((sub.type, sub.path), (FileType.DIR, f"{DIR}/sub"), "sub entry")
        two = await fs.list(DIR, depth=2)
        paths = sorted(e.path for e in two)
        check(f"{DIR}/sub/m2.txt" in paths and f"{DIR}/a.txt" in paths, "depth 2 has sub/m2.txt", paths)
        eq(len(two), 7, "depth 2 count")

    with step("files.exists: True and False"):
        eq(await fs.exists(f"{DIR}/a.txt"), True, "a.txt")
        eq(await fs.exists(DIR), True, "the dir")
        eq(await fs.exists(f"{DIR}/missing.txt"), False, "missing")

    with step("files.make_dir: True, then False when it exists"):
        eq(await fs.make_dir(f"{DIR}/made/deep"), True, "first")
        eq(await fs.make_dir(f"{DIR}/made/deep"), False, "again")
        i = await fs.get_info(f"{DIR}/made/deep")
        eq((i.type, i.owner), (FileType.DIR, "user"), "a dir of user")

    with step("commands.run: a relative cwd resolves against home"):
        eq((await sbx.commands.run("pwd", cwd="envd-py-async/made")).stdout, f"{DIR}/made\n", "pwd")

    with step("files.rename"):
        e = await fs.rename(f"{DIR}/a.txt", f"{DIR}/renamed/a2.txt")
        eq((e.name, e.path, e.type), ("a2.txt", f"{DIR}/renamed/a2.txt", FileType.FILE), "entry")
        eq(await fs.exists(f"{DIR}/a.txt"), False, "old path")
        eq(await fs.read(f"{DIR}/renamed/a2.txt"), "hello text\n", "content")

    with step("files.remove a file and a directory tree"):
        await fs.remove(f"{DIR}/renamed/a2.txt")
        eq(await fs.exists(f"{DIR}/renamed/a2.txt"), False, "file")
        await fs.remove(f"{DIR}/made")
        eq(await fs.exists(f"{DIR}/made"), False, "tree")

    with step("files.watch_dir (recursive) on_event: create, write, remove"):
        await fs.make_dir(f"{DIR}/watch/sub")
        events = []
        exits = []
        w = await fs.watch_dir(f"{DIR}/watch", on_event=events.append, on_exit=exits.append, recursive=True)
        try:
            await sbx.commands.run(
                f"echo hi > {DIR}/watch/sub/w.txt && echo top > {DIR}/watch/top.txt && rm {DIR}/watch/sub/w.txt"
            )
            want = {
                ("sub/w.txt", FilesystemEventType.CREATE),
                ("sub/w.txt", FilesystemEventType.WRITE),
                ("sub/w.txt", FilesystemEventType.REMOVE),
                ("top.txt", FilesystemEventType.CREATE),
            }
            await await_for(
                lambda: want <= {(e.name, e.type) for e in events}, lambda: f"the events (got {events})"
            )
            eq(exits, [], "on_exit while watching")
        finally:
            await w.stop()
        eq(exits, [None], "on_exit after stop")

    with step("files.watch_dir of a missing directory is FileNotFoundException"):
        with raises(FileNotFoundException, "watch missing"):
            await fs.watch_dir(f"{DIR}/no-such-dir", on_event=lambda _: None)


# ---- the sandbox ----------------------------------------------------------------------


async def sandbox(sbx):
    with step("is_running: True"):
        eq(await sbx.is_running(), True, "is_running")

    # Usage (GET /sandboxes/{id}/metrics): sbxd samples every few seconds; a
    # sample taken while a busy loop runs shows it (polled within a deadline).
    with step("get_metrics: a sample of the busy sandbox (CPU, memory, disk)"):
        check(isinstance(await sbx.get_metrics(), list), "get_metrics returns a list")
        busy = await sbx.commands.run("while :; do :; done", background=True)
        since = datetime.now(timezone.utc).replace(microsecond=0)
        found = []

        async def sampled():
            found[:] = [m for m in await sbx.get_metrics(start=since) if m.cpu_used_pct > 0 and utc(m.timestamp) >= since]
            return bool(found)

        await await_for(sampled, "a sample with CPU in use", timeout=60)
        check_busy_metric(found[-1])
        eq(await busy.kill(), True, "kill the busy loop")

    with step("get_metrics: by sandbox id; a start in the future selects none"):
        by_id = await AsyncSandbox.get_metrics(sbx.sandbox_id, **OPTS)
        check(len(by_id) > 0 and all(m.mem_total == 2048 << 20 for m in by_id), "by id", by_id)
        eq(await sbx.get_metrics(start=datetime.now(timezone.utc) + timedelta(hours=1)), [], "future start")

    with step("get_host(port) names the sandbox"):
        host = sbx.get_host(8080)
        check(sbx.sandbox_id in host and host.startswith("8080-"), "host", host)

    # Pre-signed URLs: signed with the envdAccessToken; with sandbox_url they are
    # SBX_URL/files?path=…&signature=… (no sandbox id, no headers: §1.5, §3.6).
    async with httpx.AsyncClient(timeout=60) as http:
        with step("download_url: a plain GET gets the file"):
            await sbx.files.write(f"{DIR}/dl.txt", "download me")
            link = sbx.download_url(f"{DIR}/dl.txt", use_signature_expiration=120)
            check("signature=" in link and "signature_expiration=" in link, "signed, expiring", link)
            res = await http.get(link)
            eq(res.status_code, 200, "status")
            eq(res.content, b"download me", "body")

        with step("download_url: a bad signature is 401"):
            link = re.sub(r"signature=[^&]+", "signature=v1_bad", sbx.download_url(f"{DIR}/dl.txt"))
            res = await http.get(link)
            eq(res.status_code, 401, "status")
            check(b"download me" not in res.content, "no content")

        with step("upload_url: a plain multipart POST writes the file"):
            path = f"{DIR}/ul.txt"
            res = await http.post(sbx.upload_url(path), files={"file": (path, b"uploaded via url")})
            eq(res.status_code, 200, "status")
            eq(await sbx.files.read(path), "uploaded via url", "content")
            eq((await sbx.files.get_info(path)).owner, "user", "owner")


# Preview URLs (getHost) are driven by preview.mjs / python/preview.py (tests/e2b_preview.rs).


async def main():
    sbx = None
    try:
        with step("AsyncSandbox.create"):
            sbx = await AsyncSandbox.create("base", timeout=600, envs={"SBX_CREATE_ENV": "from-create"}, **OPTS)
        await commands(sbx)
        await background(sbx)
        await pty(sbx)
        await files(sbx)
        await sandbox(sbx)
        with step("kill"):
            eq(await sbx.kill(), True, "kill")
            sbx = None
    except Exception as e:
        fail(e)
        if sbx is not None:
            try:
                await sbx.kill()
            except Exception:
                pass
        sys.exit(1)
    passed("e2b envd (python async)")


if __name__ == "__main__":
    asyncio.run(main())
