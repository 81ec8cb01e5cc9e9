"""to_host_path: relative/absolute resolution, symlinks, escapes (local view == host view)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from environments.sandboxes.base import PathEscapeError
from environments.sandboxes.local import LocalSandbox
from environments.sandboxes.paths import resolve_to_host
from environments.sandboxes.settings import SandboxSettings

pytestmark = pytest.mark.timeout(120)  # a hang detector: the tests' own waits (up to 30 s) fail first


@pytest.fixture
def box(tmp_path: Path) -> Iterator[LocalSandbox]:
    sb = LocalSandbox("paths", SandboxSettings(sandbox_root=tmp_path / "root"))
    yield sb
    sb.cleanup()


def test_relative_paths_resolve_against_cwd(box: LocalSandbox) -> None:
    ws = box.host_workspace
    assert box.to_host_path("a.txt") == ws / "a.txt"
    box.execute("mkdir -p src && cd src", 5)
    assert box.to_host_path("main.py") == ws / "src" / "main.py"
    assert box.to_host_path("../README") == ws / "README"
    assert box.to_host_path("~/notes") == ws / "notes"
    assert box.to_host_path(f"{ws}/x/y") == ws / "x" / "y"
    assert box.to_host_path(".") == ws / "src"


def test_dotdot_traversal_refused(box: LocalSandbox) -> None:
    with pytest.raises(PathEscapeError) as info:
        box.to_host_path("../../etc/passwd")
    assert "../../etc/passwd" in str(info.value) and box.workspace in str(info.value)


def test_absolute_outside_refused(box: LocalSandbox) -> None:
    with pytest.raises(PathEscapeError, match="outside the workspace"):
        box.to_host_path("/etc/passwd")
    # a sibling whose name merely starts with the workspace name is outside too
    with pytest.raises(PathEscapeError):
        box.to_host_path(box.workspace + "-evil/x")


def test_symlink_pointing_outside_refused(box: LocalSandbox, tmp_path: Path) -> None:
    ws = box.host_workspace
    outside = tmp_path / "outside"
    outside.mkdir()
    (ws / "link").symlink_to(outside)
    (ws / "filelink").symlink_to("/etc/passwd")
    with pytest.raises(PathEscapeError):
        box.to_host_path("link/secret.txt")
    with pytest.raises(PathEscapeError):
        box.to_host_path("filelink")


def test_symlink_inside_is_followed(box: LocalSandbox) -> None:
    ws = box.host_workspace
    (ws / "real").mkdir()
    (ws / "alias").symlink_to("real")
    assert box.to_host_path("alias/f") == ws / "real" / "f"


def test_cwd_outside_workspace_makes_relative_paths_escape(box: LocalSandbox) -> None:
    box.execute("cd /tmp", 5)
    with pytest.raises(PathEscapeError):
        box.to_host_path("file")


def test_bad_path_values() -> None:
    kwargs = dict(cwd="/ws", home="/ws", view_root="/ws", host_root=Path("/host"))
    with pytest.raises(ValueError, match="path is empty"):
        resolve_to_host("", **kwargs)
    with pytest.raises(ValueError, match="NUL"):
        resolve_to_host("a\0b", **kwargs)
    with pytest.raises(TypeError, match="path must be a str"):
        resolve_to_host(3, **kwargs)  # type: ignore[arg-type]


def test_view_mapping_reads_absolute_links_in_the_view(tmp_path: Path) -> None:
    """bwrap-style: the sandbox sees /workspace, the host dir is elsewhere."""
    host = tmp_path / "ws"
    (host / "data").mkdir(parents=True)
    os.symlink("/workspace/data", host / "abs")  # absolute *inside the view*
    os.symlink("/etc", host / "etc")
    kwargs = dict(cwd="/workspace", home="/workspace", view_root="/workspace", host_root=host)
    assert resolve_to_host("abs/f", **kwargs) == host / "data" / "f"
    assert resolve_to_host("/workspace/../workspace/data", **kwargs) == host / "data"
    with pytest.raises(PathEscapeError):
        resolve_to_host("etc/passwd", **kwargs)
    with pytest.raises(PathEscapeError):
        resolve_to_host("/tmp/x", **kwargs)


def test_symlink_loop_is_an_error(tmp_path: Path) -> None:
    host = tmp_path / "ws"
    host.mkdir()
    os.symlink("b", host / "a")
    os.symlink("a", host / "b")
    with pytest.raises(PathEscapeError, match="symbolic links"):
        resolve_to_host("a", cwd="/w", home="/w", view_root="/w", host_root=host)
