"""File tools never leave the sandbox workspace: '..', absolute paths, symlinks.

Runs on the host path (local sandbox) and the shell path (host view hidden,
as on docker). Each refusal is checked for its message and for having had no
effect outside the workspace.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

from environments.sandboxes import cleanup_vm, get_sandbox
from environments.tools import handle_function_call, sandbox_access
from tests.helpers.sandboxes import ShellOnly

SECRET = "top-secret-outside-content"


@pytest.fixture(params=["host", "shell"])
def setup(request, monkeypatch, tmp_path):
    task_id = f"sec-{request.param}-{uuid.uuid4().hex[:8]}"
    if request.param == "shell":
        real = sandbox_access.get_sandbox
        monkeypatch.setattr(sandbox_access, "get_sandbox", lambda tid: ShellOnly(real(tid)))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET + "\n")
    ws = Path(get_sandbox(task_id).host_workspace)
    os.symlink(outside, ws / "link_dir")
    os.symlink(outside / "secret.txt", ws / "link_file.txt")
    rel_up = os.path.relpath(outside / "secret.txt", ws)  # ../../.../outside/secret.txt
    yield task_id, outside, ws, rel_up
    cleanup_vm(task_id)


def call(task, name, **args):
    return json.loads(handle_function_call(name, args, task_id=task))


def _escapes(setup):
    task, outside, ws, rel_up = setup
    return [rel_up, str(outside / "secret.txt"), "link_file.txt", "link_dir/secret.txt", "/etc/passwd", "~/../x"]


def _assert_refused(out, path):
    assert "error" in out, out
    assert out["error"].startswith(f"path '{path}' is outside the sandbox workspace"), out["error"]


def test_read_file_refuses_escapes(setup):
    for path in _escapes(setup):
        out = call(setup[0], "read_file", path=path)
        _assert_refused(out, path)
        assert SECRET not in json.dumps(out)


def test_write_file_refuses_escapes(setup):
    task, outside, ws, rel_up = setup
    for path in _escapes(setup) + ["link_dir/new.txt"]:
        _assert_refused(call(task, "write_file", path=path, content="pwned"), path)
    assert (outside / "secret.txt").read_text() == SECRET + "\n"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


def test_patch_refuses_escapes(setup):
    task, outside, ws, rel_up = setup
    for path in _escapes(setup)[:4]:
        _assert_refused(call(task, "patch", path=path, old_string="top", new_string="pwned"), path)
    assert (outside / "secret.txt").read_text() == SECRET + "\n"


def test_search_files_refuses_escapes_and_skips_escaping_links(setup):
    task, outside, ws, rel_up = setup
    for path in [str(outside), os.path.dirname(rel_up), "link_dir"]:
        _assert_refused(call(task, "search_files", pattern="secret", path=path), path)
    # searching the workspace itself must not follow the links out of it
    (ws / "inside.txt").write_text("nothing secret here\n")
    out = call(task, "search_files", pattern="top-secret")
    assert out["total_count"] == 0, out
    names = call(task, "search_files", pattern="*", target="files")
    assert names["files"] == ["inside.txt"]


def test_links_inside_the_workspace_still_work(setup):
    task, outside, ws, rel_up = setup
    (ws / "real.txt").write_text("fine\n")
    os.symlink(ws / "real.txt", ws / "alias.txt")
    assert call(task, "read_file", path="alias.txt")["content"] == "1|fine"
    assert call(task, "read_file", path="sub/../real.txt", limit=9)["content"] == "1|fine"  # same file: new window
