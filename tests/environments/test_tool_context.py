"""ToolContext: sync API, transfer round-trips, cleanup, async twins (behaviours 36-38)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import uuid
from pathlib import Path

import pytest

from environments.sandboxes import cleanup_vm, get_sandbox, get_sandbox_info
from environments.tool_context import UPLOAD_CHUNK_CHARS, ToolContext
from environments.tools import handle_function_call


@pytest.fixture
def ctx():
    context = ToolContext(f"ctx-{uuid.uuid4().hex[:8]}")
    yield context
    cleanup_vm(context.task_id)


def _pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[-1][:1] != "Z"
    except FileNotFoundError:
        return False


# ------------------------------------------------------------------ sync API


def test_terminal_returns_a_dict(ctx):
    out = ctx.terminal("echo hi && exit 2")
    assert out == {"output": "hi\n", "exit_code": 2, "error": None}


def test_non_json_tool_result_becomes_exit_minus_one(ctx, monkeypatch):
    import environments.tool_context as tc

    monkeypatch.setattr(tc, "handle_function_call", lambda *a, **k: "not json at all")
    assert ctx.terminal("echo hi") == {"exit_code": -1, "output": "not json at all"}


def test_read_write_search_shapes(ctx):
    written = ctx.write_file("out/answer.txt", "42\n")
    assert written["bytes_written"] == 3 and written["dirs_created"] is True
    read = ctx.read_file("out/answer.txt")
    assert read["content"] == "1|42" and read["total_lines"] == 1
    assert ctx.read_file("out/answer.txt") == read  # never deduplicated for reward code
    found = ctx.search("42", "out")
    assert found["total_count"] == 1 and found["matches"][0]["path"] == "out/answer.txt"
    assert "File not found" in ctx.read_file("missing.txt")["error"]


def test_call_tool_returns_the_raw_string(ctx):
    raw = ctx.call_tool("terminal", {"command": "echo raw"})
    assert isinstance(raw, str) and json.loads(raw)["output"] == "raw\n"


def test_offline_tools_return_error_dicts(ctx):
    for out in (
        ctx.web_search("x"),
        ctx.web_extract(["http://x"]),
        ctx.browser_navigate("http://x"),
        ctx.browser_snapshot(),
    ):
        assert "not available offline" in out["error"]


def test_rollout_state_is_visible_to_the_reward(ctx):
    handle_function_call("write_file", {"path": "greeting.txt", "content": "hello\n"}, task_id=ctx.task_id)
    handle_function_call(
        "terminal", {"command": "cd /tmp 2>/dev/null; cd ~ && mkdir -p w && cd w"}, task_id=ctx.task_id
    )
    assert ctx.terminal("cat ../greeting.txt")["output"] == "hello\n"  # same session: cwd carried over
    assert ctx.read_file("~/greeting.txt")["content"] == "1|hello"


# ------------------------------------------------------------------ transfer


def test_upload_download_small_binary_round_trip(ctx, tmp_path):
    payload = bytes(range(256)) * 3 + b"\x00\n\r\xff"
    src = tmp_path / "small.bin"
    src.write_bytes(payload)
    up = ctx.upload_file(str(src), "data/small.bin")
    assert up["exit_code"] == 0 and up["bytes"] == len(payload)
    assert (Path(get_sandbox(ctx.task_id).host_workspace) / "data/small.bin").read_bytes() == payload
    dst = tmp_path / "back" / "small.bin"
    assert ctx.download_file("data/small.bin", str(dst)) == {"success": True, "bytes": len(payload)}
    assert dst.read_bytes() == payload


def test_upload_download_large_file_uses_the_chunked_path(ctx, tmp_path, monkeypatch):
    payload = os.urandom(900_000)  # ~1.2 MB of base64: many upload chunks, several download chunks
    assert len(payload) * 4 / 3 > 10 * UPLOAD_CHUNK_CHARS
    src = tmp_path / "big.bin"
    src.write_bytes(payload)
    seen = []
    sandbox = get_sandbox(ctx.task_id)
    real_execute = sandbox.execute

    def spy(command, timeout, *, stdin_data=None, isolated=False):
        seen.append(len(stdin_data or ""))
        return real_execute(command, timeout, stdin_data=stdin_data, isolated=isolated)

    monkeypatch.setattr(sandbox, "execute", spy)
    assert ctx.upload_file(str(src), "big.bin")["exit_code"] == 0
    assert max(seen) <= UPLOAD_CHUNK_CHARS and sum(seen) >= len(payload) * 4 / 3
    dst = tmp_path / "big.out"
    assert ctx.download_file("big.bin", str(dst)) == {"success": True, "bytes": len(payload)}
    assert dst.read_bytes() == payload


# A file the model's tools would show changed: escape codes stripped, a token redacted, bytes
# that are not UTF-8 replaced -- read_text must give what is stored.
STORED = b"\x1b[31mred\x1b[0m sk-proj-abcdefghijklmnopqrstuvwxyz0123456789\n\xff tail\n"


def test_read_text_is_the_file_as_stored_and_runs_no_command(ctx, monkeypatch):
    sandbox = get_sandbox(ctx.task_id)
    workspace = Path(sandbox.host_workspace)
    (workspace / "sub").mkdir()
    (workspace / "sub" / "f.txt").write_bytes(STORED)
    assert "redacted" in ctx.terminal("cat sub/f.txt")["output"]  # what cat through the terminal tool gives
    ran = []
    real_execute = sandbox.execute
    monkeypatch.setattr(sandbox, "execute", lambda *a, **kw: ran.append(a) or real_execute(*a, **kw))
    got = ctx.read_text("sub/f.txt")
    assert got == {"content": STORED.decode("utf-8", errors="replace"), "bytes": len(STORED)}
    assert ran == []  # a host workspace: read without a process
    # relative to the agent's last cwd, as the verifier's commands are
    monkeypatch.undo()
    assert json.loads(handle_function_call("terminal", {"command": "cd sub"}, task_id=ctx.task_id))["exit_code"] == 0
    assert ctx.read_text("f.txt")["content"] == got["content"]


def test_read_text_errors_are_named_and_quick(ctx):
    workspace = Path(get_sandbox(ctx.task_id).host_workspace)
    (workspace / "d").mkdir()
    os.mkfifo(workspace / "pipe")
    assert ctx.read_text("nope.txt") == {"error": "no such file: nope.txt"}
    assert "directory" in ctx.read_text("d")["error"]
    started = time.monotonic()
    assert "FIFO" in ctx.read_text("pipe")["error"]  # refused, never blocks
    assert time.monotonic() - started < 5
    (workspace / "big.txt").write_bytes(b"x" * 100)
    assert "error" in ctx.read_text("big.txt", limit=10)


async def test_read_text_async_twin(ctx):
    Path(get_sandbox(ctx.task_id).host_workspace, "a.txt").write_text("42\n")
    assert await ctx.a_read_text("a.txt") == {"content": "42\n", "bytes": 3}


def test_transfer_errors(ctx, tmp_path):
    assert ctx.upload_file(str(tmp_path / "nope.bin"), "x.bin") == {
        "exit_code": -1,
        "output": f"Local file not found: {tmp_path / 'nope.bin'}",
    }
    missing = ctx.download_file("nope.bin", str(tmp_path / "a"))
    assert missing == {"success": False, "error": "Remote file not found: nope.bin"}
    ctx.terminal(": > empty.txt")
    assert ctx.download_file("empty.txt", str(tmp_path / "b")) == {
        "success": False,
        "error": "Remote file is empty: empty.txt",
    }
    assert ctx.upload_dir(str(tmp_path / "nodir"), "d")[0]["exit_code"] == -1
    assert ctx.download_dir("nodir", str(tmp_path / "c"))[0]["success"] is False


def test_upload_dir_and_download_dir_preserve_the_tree(ctx, tmp_path):
    src = tmp_path / "tree"
    files = {"a.txt": b"A\n", "sub/b.bin": b"\x00\x01", "sub/deeper/c.txt": b"C" * 1000}
    for rel, data in files.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(data)
    results = ctx.upload_dir(str(src), "proj")
    assert len(results) == 3 and all(r["exit_code"] == 0 for r in results)
    dst = tmp_path / "copy"
    down = ctx.download_dir("proj", str(dst))
    assert len(down) == 3 and all(r["success"] for r in down)
    got = {p.relative_to(dst).as_posix(): p.read_bytes() for p in dst.rglob("*") if p.is_file()}
    assert got == files
    assert ctx.terminal("pwd")["output"].strip() == get_sandbox(ctx.task_id).workspace  # session cwd untouched


# ------------------------------------------------------------------ cleanup


def test_cleanup_kills_background_processes_and_is_safe_twice(ctx):
    started = json.loads(ctx.call_tool("terminal", {"command": "sleep 60", "background": True}))
    pid = started["pid"]
    ws = Path(get_sandbox(ctx.task_id).host_workspace)
    assert _pid_alive(pid)
    ctx.cleanup()
    deadline = time.monotonic() + 5
    while _pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _pid_alive(pid)
    assert get_sandbox_info(ctx.task_id) is None and not ws.exists()
    ctx.cleanup()  # idempotent


def test_cleanup_tolerates_failures(ctx, monkeypatch, caplog):
    import environments.tools.sandbox_access as access

    tried = []

    def broken(task_id):
        tried.append(task_id)
        raise RuntimeError("backend exploded")

    monkeypatch.setattr(access, "cleanup_vm", broken)
    with caplog.at_level(logging.WARNING, logger="environments.tool_context"):
        ctx.cleanup()  # must not raise: it runs in finally blocks
    assert tried == [ctx.task_id], "cleanup never reached the sandbox backend"
    logged = [r for r in caplog.records if r.exc_info and "backend exploded" in str(r.exc_info[1])]
    assert logged and ctx.task_id in logged[0].getMessage(), [r.getMessage() for r in caplog.records]


# ------------------------------------------------------------------ async twins


async def test_async_twins_work_inside_a_running_loop(ctx, tmp_path):
    assert (await ctx.a_write_file("f.txt", "abc\n"))["bytes_written"] == 4
    assert (await ctx.a_read_file("f.txt"))["content"] == "1|abc"
    assert (await ctx.a_search("abc"))["total_count"] == 1
    assert json.loads(await ctx.a_call_tool("terminal", {"command": "echo x"}))["output"] == "x\n"
    (tmp_path / "u.bin").write_bytes(b"\x01\x02")
    assert (await ctx.a_upload_file(str(tmp_path / "u.bin"), "u.bin"))["exit_code"] == 0
    assert (await ctx.a_download_file("u.bin", str(tmp_path / "d.bin")))["success"]
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "x").write_text("x")
    assert (await ctx.a_upload_dir(str(tmp_path / "dir"), "dir"))[0]["exit_code"] == 0
    assert (await ctx.a_download_dir("dir", str(tmp_path / "dir2")))[0]["success"]
    await ctx.a_cleanup()
    assert get_sandbox_info(ctx.task_id) is None


async def test_a_terminal_does_not_block_the_loop(ctx):
    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            await asyncio.sleep(0.05)
            ticks += 1

    task = asyncio.create_task(ticker())
    try:
        out = await ctx.a_terminal("sleep 1; echo done")
    finally:
        task.cancel()
    assert out["output"] == "done\n"
    assert ticks >= 10  # ~20 expected; a blocked loop would give 0


async def test_sync_methods_run_directly_inside_a_running_loop(ctx):
    # seed reward code calls the sync API from async compute_reward: it must just work
    assert ctx.terminal("echo sync")["output"] == "sync\n"
