"""File tools over real sandboxes (behaviour 35).

Every behaviour runs twice: ``host`` (local sandbox, files reached through
to_host_path) and ``shell`` (the same sandbox with its host view hidden, so
the tools go through commands as they do on docker).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from environments.sandboxes import cleanup_vm, get_sandbox
from environments.tools import handle_function_call, sandbox_access
from tests.helpers.sandboxes import ShellOnly


@pytest.fixture(params=["host", "shell"])
def task(request, monkeypatch):
    task_id = f"files-{request.param}-{uuid.uuid4().hex[:8]}"
    if request.param == "shell":
        real = sandbox_access.get_sandbox
        monkeypatch.setattr(sandbox_access, "get_sandbox", lambda tid: ShellOnly(real(tid)))
    yield task_id
    cleanup_vm(task_id)


def call(task, name, **args):
    return json.loads(handle_function_call(name, args, task_id=task))


def host_dir(task) -> Path:
    return Path(get_sandbox(task).host_workspace)


def sh(task, command):
    result = get_sandbox(task).execute(command, 10)
    assert result.exit_code == 0, result.output
    return result.output


# ------------------------------------------------------------------ write_file


def test_write_file_creates_parents_and_counts_bytes(task):
    out = call(task, "write_file", path="deep/er/notes.txt", content="héllo\n")
    assert out["bytes_written"] == len("héllo\n".encode()) == 7
    assert out["dirs_created"] is True
    assert (host_dir(task) / "deep/er/notes.txt").read_text() == "héllo\n"
    again = call(task, "write_file", path="deep/er/notes.txt", content="x")
    assert again["dirs_created"] is False and again["bytes_written"] == 1


def test_write_file_refuses_a_directory(task):
    sh(task, "mkdir -p adir")
    assert "is a directory" in call(task, "write_file", path="adir", content="x")["error"]


def test_paths_are_relative_to_the_current_directory(task):
    sh(task, "mkdir -p sub && cd sub")
    call(task, "write_file", path="here.txt", content="in sub\n")
    assert (host_dir(task) / "sub/here.txt").read_text() == "in sub\n"


# ------------------------------------------------------------------ read_file


def test_read_file_numbering_offset_limit_and_hint(task):
    call(task, "write_file", path="f.txt", content="".join(f"line {i}\n" for i in range(1, 11)))
    out = call(task, "read_file", path="f.txt", offset=3, limit=4)
    assert out["content"] == "3|line 3\n4|line 4\n5|line 5\n6|line 6"
    assert out["total_lines"] == 10 and out["file_size"] == 71 and out["truncated"] is True
    assert "offset=7" in out["hint"]
    tail = call(task, "read_file", path="f.txt", offset=7)
    assert tail["content"].splitlines()[0] == "7|line 7" and tail["truncated"] is False and tail["hint"] is None


def test_read_file_argument_errors(task):
    call(task, "write_file", path="f.txt", content="a\nb\n")
    assert "past the end" in call(task, "read_file", path="f.txt", offset=9)["error"]
    assert "'limit' must be <= 2000, got 5000" in call(task, "read_file", path="f.txt", limit=5000)["error"]
    assert "'offset' must be >= 1" in call(task, "read_file", path="f.txt", offset=0)["error"]


def test_read_file_not_found_suggests_similar(task):
    call(task, "write_file", path="src/config.yaml", content="a: 1\n")
    out = call(task, "read_file", path="src/confg.yaml")
    assert out["error"] == "File not found: src/confg.yaml"
    assert "src/config.yaml" in out["similar_files"]


def test_read_file_rejects_binary(task):
    (host_dir(task) / "blob.dat").write_bytes(b"\x7fELF\x00\x01\x02binary")
    assert "binary" in call(task, "read_file", path="blob.dat")["error"]
    (host_dir(task) / "pic.png").write_bytes(b"not really")
    assert "binary" in call(task, "read_file", path="pic.png")["error"]


def test_read_file_rejects_oversized_reads_with_guidance(task):
    (host_dir(task) / "wide.txt").write_text(("x" * 1000 + "\n") * 150)
    out = call(task, "read_file", path="wide.txt")
    assert "100000-character limit" in out["error"] and "limit" in out["error"]
    assert call(task, "read_file", path="wide.txt", limit=50)["total_lines"] == 150


def test_identical_reread_of_unchanged_file_is_deduplicated(task):
    call(task, "write_file", path="d.txt", content="one\ntwo\n")
    first = call(task, "read_file", path="d.txt")
    assert first["content"] == "1|one\n2|two"
    assert call(task, "read_file", path="d.txt") == {
        "status": "unchanged",
        "dedup": True,
        "path": "d.txt",
        "message": "'d.txt' has not changed since you last read these lines (1-2); use that output.",
    }
    assert "content" in call(task, "read_file", path="d.txt", limit=1)  # different window
    call(task, "write_file", path="d.txt", content="one\nTWO\n")
    assert call(task, "read_file", path="d.txt")["content"] == "1|one\n2|TWO"


# ------------------------------------------------------------------ patch


def test_patch_unique_replace_returns_a_diff(task):
    call(task, "write_file", path="p.py", content="a = 1\nb = 2\nc = 3\n")
    out = call(task, "patch", path="p.py", old_string="b = 2", new_string="b = 20")
    assert out["success"] is True and out["replacements"] == 1
    assert "-b = 2\n+b = 20\n" in out["diff"] and out["diff"].startswith("--- a/p.py\n+++ b/p.py\n")
    assert (host_dir(task) / "p.py").read_text() == "a = 1\nb = 20\nc = 3\n"


def test_patch_accepts_the_hermes_mode_argument(task):
    # Hermes-trained models send mode="replace" (the seed's schema); V4A "patch" mode is refused clearly.
    call(task, "write_file", path="m.txt", content="old\n")
    out = call(task, "patch", mode="replace", path="m.txt", old_string="old", new_string="new")
    assert out["success"] is True and (host_dir(task) / "m.txt").read_text() == "new\n"
    out = call(task, "patch", mode="patch", path="m.txt", old_string="new", new_string="x")
    assert "'mode' must be one of 'replace'" in out["error"]
    assert (host_dir(task) / "m.txt").read_text() == "new\n"


def test_patch_non_unique_needs_replace_all(task):
    call(task, "write_file", path="p.txt", content="x\nx\nx\n")
    out = call(task, "patch", path="p.txt", old_string="x", new_string="y")
    assert "matches 3 places" in out["error"] and "replace_all" in out["error"]
    assert (host_dir(task) / "p.txt").read_text() == "x\nx\nx\n"
    out = call(task, "patch", path="p.txt", old_string="x", new_string="y", replace_all=True)
    assert out["replacements"] == 3 and (host_dir(task) / "p.txt").read_text() == "y\ny\ny\n"


def test_patch_not_found_and_missing_file(task):
    call(task, "write_file", path="p.txt", content="def f():\n    return 1\n")
    out = call(task, "patch", path="p.txt", old_string="return 2", new_string="return 3")
    assert out["error"] == "'old_string' was not found in 'p.txt'."
    hint = call(task, "patch", path="p.txt", old_string="def f():\n  return 1", new_string="x")
    assert "different whitespace" in hint["error"]
    assert call(task, "patch", path="nope.txt", old_string="a", new_string="b")["error"] == "File not found: nope.txt"


# ------------------------------------------------------------------ search_files


@pytest.fixture
def tree(task):
    call(
        task, "write_file", path="src/app.py", content="import os\ndef main():\n    print('hello')\n    print('bye')\n"
    )
    call(task, "write_file", path="src/util.py", content="def helper():\n    return 'hello'\n")
    call(task, "write_file", path="README.md", content="# hello world\n")
    (host_dir(task) / "bin.dat").write_bytes(b"hello\x00\x01")
    return task


def test_search_content_mode_with_context(tree):
    out = call(tree, "search_files", pattern=r"print\('h", context=1)
    assert out["total_count"] == 1
    m = out["matches"][0]
    assert (m["path"], m["line"], m["content"]) == ("src/app.py", 3, "    print('hello')")
    assert m["before"] == ["def main():"] and m["after"] == ["    print('bye')"]


def test_search_files_only_count_glob_and_paging(tree):
    files = call(tree, "search_files", pattern="hello", output_mode="files_only")
    assert files["files"] == ["README.md", "src/app.py", "src/util.py"]  # the binary file is skipped
    counts = call(tree, "search_files", pattern="print|hello", output_mode="count", path="src")
    assert counts["counts"] == {"src/app.py": 2, "src/util.py": 1} and counts["total_count"] == 3
    py = call(tree, "search_files", pattern="hello", file_glob="*.py", output_mode="files_only")
    assert py["files"] == ["src/app.py", "src/util.py"]
    page = call(tree, "search_files", pattern="hello", limit=1, offset=1)
    assert page["total_count"] == 3 and len(page["matches"]) == 1 and page["truncated"] is True


def test_search_target_files_globs_names(tree):
    out = call(tree, "search_files", pattern="*.py", target="files")
    assert out == {"total_count": 2, "files": ["src/app.py", "src/util.py"], "truncated": False}


def test_search_errors(tree):
    assert "not a valid regular expression" in call(tree, "search_files", pattern="(unclosed")["error"]
    assert "does not exist" in call(tree, "search_files", pattern="x", path="nowhere")["error"]
    assert (
        "'target' must be one of 'content', 'files'" in call(tree, "search_files", pattern="x", target="dirs")["error"]
    )


def test_dedup_state_is_forgotten_when_the_sandbox_closes(task):
    from environments.tools import files

    call(task, "write_file", path="d.txt", content="same\n")
    assert "content" in call(task, "read_file", path="d.txt")
    assert task in files._READS
    cleanup_vm(task)  # on bwrap/docker the next sandbox has the same paths: stale state would dedup wrongly
    assert task not in files._READS


def test_search_stops_at_its_time_budget_with_partial_results(tree, monkeypatch):
    monkeypatch.setenv("HERMES_SEARCH_TIMEOUT_S", "0")  # every file after the first is past the deadline
    out = call(tree, "search_files", pattern="hello", output_mode="files_only")
    assert out["timed_out"] is True and out["truncated"] is True
    assert "timed out after 0s" in out["error"] and "partial" in out["error"]
    assert len(out["files"]) <= 1  # only what it saw before the deadline
    monkeypatch.delenv("HERMES_SEARCH_TIMEOUT_S")
    full = call(tree, "search_files", pattern="hello", output_mode="files_only")
    assert "timed_out" not in full and len(full["files"]) == 3
