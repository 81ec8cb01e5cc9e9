"""rootfs from an image tarball (OCI layout or `docker save`), unpacked safely (issue 12).

Every tarball is built here with ``tarfile``. Each hostile image is first shown to harm a
naive extractor (``tarfile.extractall`` layer by layer, the obvious implementation) in a
scratch dir, so the attack is real; then ours must refuse it and leave the host as it was.
The oracle for "as it was": the bytes of a victim file and a listing of the outside dir.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import stat
import subprocess
import tarfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from environments.sandboxes import rootfs as rf

pytestmark = pytest.mark.timeout(60)

Entry = tuple[str, str, object]  # (kind, name, data): file/dir/sym/lnk/chr


def _layer(entries: Sequence[Entry], gz: bool = False) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for kind, name, data in entries:
            info = tarfile.TarInfo(name)
            info.mode = 0o755 if kind == "dir" else 0o644
            body: bytes | None = None
            if kind == "file":
                body = data if isinstance(data, bytes) else str(data).encode()
                info.size = len(body)
            elif kind == "exe":
                body = data if isinstance(data, bytes) else Path(str(data)).read_bytes()
                info.size, info.mode = len(body), 0o755
            elif kind == "suid":
                body, info.size, info.mode = b"x", 1, 0o4755
            elif kind == "dir":
                info.type = tarfile.DIRTYPE
            elif kind == "sym":
                info.type, info.linkname = tarfile.SYMTYPE, str(data)
            elif kind == "lnk":
                info.type, info.linkname = tarfile.LNKTYPE, str(data)
            elif kind == "chr":
                info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
            elif kind == "huge":  # declares a size; the body is zeros streamed by tarfile
                info.size = int(data)  # type: ignore[arg-type]
                body = bytes(info.size)
            tar.addfile(info, io.BytesIO(body) if body is not None else None)
    data = raw.getvalue()
    return gzip.compress(data, compresslevel=1) if gz else data


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def docker_save(path: Path, layers: list[bytes]) -> Path:
    """The `docker save` (pre-OCI) layout: <id>/layer.tar + manifest.json."""
    with tarfile.open(path, "w") as tar:
        names = []
        for i, blob in enumerate(layers):
            name = f"{i:064x}/layer.tar"
            _add(tar, name, blob)
            names.append(name)
        _add(tar, "config.json", b"{}")
        _add(
            tar, "manifest.json", json.dumps([{"Config": "config.json", "RepoTags": ["t:1"], "Layers": names}]).encode()
        )
    return path


def oci_layout(path: Path, layers: list[bytes], gz: bool = True) -> Path:
    """OCI image layout: index.json -> manifest blob -> layer blobs (tar+gzip)."""
    media = "application/vnd.oci.image.layer.v1.tar" + ("+gzip" if gz else "")
    with tarfile.open(path, "w") as tar:
        _add(tar, "oci-layout", b'{"imageLayoutVersion": "1.0.0"}')
        descs = []
        for blob in layers:
            digest = hashlib.sha256(blob).hexdigest()
            _add(tar, f"blobs/sha256/{digest}", blob)
            descs.append({"mediaType": media, "digest": f"sha256:{digest}", "size": len(blob)})
        config = b"{}"
        _add(tar, f"blobs/sha256/{hashlib.sha256(config).hexdigest()}", config)
        manifest = json.dumps(
            {"schemaVersion": 2, "config": {"digest": f"sha256:{hashlib.sha256(config).hexdigest()}"}, "layers": descs}
        ).encode()
        mdigest = hashlib.sha256(manifest).hexdigest()
        _add(tar, f"blobs/sha256/{mdigest}", manifest)
        index = {
            "schemaVersion": 2,
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": f"sha256:{mdigest}",
                    "size": len(manifest),
                }
            ],
        }
        _add(tar, "index.json", json.dumps(index).encode())
    return path


def naive_unpack(layers: list[bytes], dest: Path) -> None:
    """What a first implementation would do: extractall each layer in turn, delete whiteouts."""
    for blob in layers:
        with tarfile.open(fileobj=io.BytesIO(blob), mode="r:*") as tar:
            for m in tar.getmembers():
                base = os.path.basename(m.name)
                if base.startswith(".wh."):
                    victim = dest / os.path.dirname(m.name) / base[4:]
                    if victim.is_dir():
                        shutil.rmtree(victim)
                    elif victim.exists():
                        victim.unlink()
                    continue
                try:
                    tar.extract(m, dest)
                except OSError:
                    pass


def snapshot(d: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(d)): (p.read_bytes() if p.is_file() and not p.is_symlink() else b"<dir>")
        for p in sorted(d.rglob("*"))
    }


# --------------------------------------------------------------------------- layers, whiteouts, cache


LOWER = [
    ("dir", "opt", None),
    ("dir", "opt/old", None),
    ("file", "opt/old/a", "a"),
    ("dir", "opt/keep", None),
    ("file", "opt/keep/b", "b"),
    ("file", "opt/gone.txt", "bye"),
    ("dir", "app", None),
    ("file", "app/data", "v1"),
    ("sym", "app/link", "/app/data"),
    ("file", "app/orig", "hard"),
    ("lnk", "app/hard", "app/orig"),
    ("suid", "usr/bin/su", None),
    ("chr", "dev/null", None),
]
UPPER = [
    ("file", "opt/keep/c", "c"),  # written before the opaque marker of its dir: kept
    ("file", "opt/keep/.wh..wh..opq", ""),
    ("file", "opt/.wh.old", ""),
    ("file", "opt/.wh.gone.txt", ""),
    ("file", "app/data", "v2"),
    ("file", "./app/new", "n"),
]


@pytest.mark.parametrize("fmt", ["docker_save", "oci_gzip"])
def test_layers_apply_in_order_with_whiteouts(tmp_path: Path, fmt: str) -> None:
    layers = [_layer(LOWER, gz=fmt == "oci_gzip"), _layer(UPPER, gz=fmt == "oci_gzip")]
    tarball = (docker_save if fmt == "docker_save" else oci_layout)(tmp_path / "img.tar", layers)
    root = Path(rf.prepare_rootfs(str(tarball), tmp_path / "cache"))
    assert sorted(os.listdir(root / "opt")) == ["keep"]
    assert sorted(os.listdir(root / "opt" / "keep")) == ["c"]  # b was a lower layer's: hidden by the opaque dir
    assert (root / "app" / "data").read_text() == "v2" and (root / "app" / "new").read_text() == "n"
    assert os.readlink(root / "app" / "link") == "/app/data"  # kept as written, never followed here
    assert os.stat(root / "app" / "hard").st_ino == os.stat(root / "app" / "orig").st_ino
    assert not os.path.lexists(root / "dev" / "null")  # device nodes are not created
    assert stat.S_IMODE(os.stat(root / "usr" / "bin" / "su").st_mode) == 0o755  # setuid dropped
    # the oracle for the whole tree: a naive extractor on a benign image gets the same files
    naive = tmp_path / "naive"
    naive.mkdir()
    naive_unpack(layers, naive)
    if (naive / "opt" / "keep" / "b").exists():  # the naive one has no opaque dirs
        (naive / "opt" / "keep" / "b").unlink()
    shutil.rmtree(naive / "dev", ignore_errors=True)
    assert snapshot(root) == {k: v for k, v in snapshot(naive).items() if not k.startswith("dev")}


def test_unpacked_once_per_content_hash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tarball = docker_save(tmp_path / "img.tar", [_layer(LOWER)])
    calls = []
    real = rf.unpack_image
    monkeypatch.setattr(rf, "unpack_image", lambda *a, **k: (calls.append(a[0]), real(*a, **k))[1])
    first = rf.prepare_rootfs(str(tarball), tmp_path / "cache")
    copy = tmp_path / "same-bytes.tar"
    shutil.copy(tarball, copy)
    assert rf.prepare_rootfs(str(copy), tmp_path / "cache") == first
    assert len(calls) == 1
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    assert Path(first) == tmp_path / "cache" / digest / "rootfs"


# --------------------------------------------------------------------------- hostile images


def _hostile(outside: Path, victim: Path) -> dict[str, list[list[Entry]]]:
    up = os.path.relpath(outside, "/")  # enough '..' to reach the outside dir from any dest
    dotdots = "../" * 12 + up
    return {
        "dotdot": [[("file", f"{dotdots}/dotdot.txt", "pwned")]],
        "absolute": [[("file", f"{outside}/abs.txt", "pwned")]],
        "symlink_then_write": [[("sym", "etc", str(outside)), ("file", "etc/via-link.txt", "pwned")]],
        "symlink_across_layers": [[("sym", "data", str(outside))], [("file", "data/later.txt", "pwned")]],
        "whiteout_through_symlink": [[("sym", "d", str(outside))], [("file", "d/.wh.victim.txt", "")]],
        "hardlink_out_then_write": [[("lnk", "h", str(victim)), ("file", "h", "pwned")]],
    }


def _harmed(outside: Path, victim: Path, before: dict[str, bytes]) -> bool:
    return snapshot(outside) != before or not victim.exists() or victim.read_bytes() != b"secret\n"


@pytest.mark.parametrize(
    "attack",
    [
        "dotdot",
        "absolute",
        "symlink_then_write",
        "symlink_across_layers",
        "whiteout_through_symlink",
        "hardlink_out_then_write",
    ],
)
def test_hostile_image_harms_a_naive_extractor_and_is_refused_by_ours(tmp_path: Path, attack: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.txt"

    def reset() -> dict[str, bytes]:
        shutil.rmtree(outside)
        outside.mkdir()
        victim.write_bytes(b"secret\n")
        return snapshot(outside)

    layers = [_layer(entries) for entries in _hostile(outside, victim)[attack]]
    before = reset()
    naive = tmp_path / "naive" / "a" / "b"
    naive.mkdir(parents=True)
    naive_unpack(layers, naive)
    assert _harmed(outside, victim, before), f"{attack}: the attack does not even work on a naive extractor"

    before = reset()
    tarball = docker_save(tmp_path / f"{attack}.tar", layers)
    with pytest.raises(rf.RootfsError) as err:
        rf.prepare_rootfs(str(tarball), tmp_path / "cache")
    assert not _harmed(outside, victim, before)
    assert "refused" in str(err.value) or "leaves the root" in str(err.value)
    assert [p.name for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock")] == []  # nothing half-done


def test_size_and_member_caps(tmp_path: Path) -> None:
    big = docker_save(tmp_path / "big.tar", [_layer([("huge", "blob", 3 << 20)], gz=True)])
    with pytest.raises(rf.RootfsError, match="more than 1048576 bytes"):
        rf.prepare_rootfs(str(big), tmp_path / "cache", rf.RootfsLimits(max_bytes=1 << 20))
    many = docker_save(tmp_path / "many.tar", [_layer([("file", f"f{i}", "x") for i in range(50)])])
    with pytest.raises(rf.RootfsError, match="more than 20 members"):
        rf.prepare_rootfs(str(many), tmp_path / "cache", rf.RootfsLimits(max_members=20))
    assert not any((tmp_path / "cache").glob("*/rootfs"))


def test_not_an_image_is_a_clear_error(tmp_path: Path) -> None:
    junk = tmp_path / "junk.tar"
    with tarfile.open(junk, "w") as tar:
        _add(tar, "readme", b"hi")
    with pytest.raises(rf.RootfsError, match="neither manifest.json .* nor index.json"):
        rf.prepare_rootfs(str(junk), tmp_path / "cache")
    (tmp_path / "plain.txt").write_text("no tar")
    with pytest.raises(rf.RootfsError, match="not a readable tar archive"):
        rf.prepare_rootfs(str(tmp_path / "plain.txt"), tmp_path / "cache")
    with pytest.raises(rf.RootfsError, match="neither a directory nor a file"):
        rf.prepare_rootfs(str(tmp_path / "missing"), tmp_path / "cache")


# --------------------------------------------------------------------------- end to end on bwrap


def _mini_system() -> list[Entry]:
    """bash + cat and the libraries they load, at the paths the host's binaries ask for,
    under a merged-/usr layout (bin, lib, lib64 -> usr/...)."""
    entries: list[Entry] = [("sym", "bin", "usr/bin"), ("sym", "lib", "usr/lib"), ("sym", "lib64", "usr/lib64")]
    wanted = {
        "/usr/bin/bash": os.path.realpath(shutil.which("bash") or "/bin/bash"),
        "/usr/bin/cat": os.path.realpath(shutil.which("cat") or "/bin/cat"),
    }
    for binary in list(wanted.values()):
        out = subprocess.run(["ldd", binary], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            path = line.split("=>")[-1].split("(")[0].strip()
            if path.startswith("/"):
                wanted["/usr" + path if not path.startswith("/usr/") else path] = os.path.realpath(path)
    return entries + [("exe", p.lstrip("/"), Path(src).read_bytes()) for p, src in sorted(wanted.items())]


@pytest.mark.skipif(shutil.which("bwrap") is None or shutil.which("ldd") is None, reason="needs bwrap and ldd")
def test_bwrap_task_runs_on_an_image_tarball_and_hostile_links_stay_inside(tmp_path: Path) -> None:
    from environments import sandboxes as sb
    from environments.task_overrides import clear_task_env_overrides, register_task_env_overrides

    outside = tmp_path / "host-secret"
    outside.mkdir()
    (outside / "key").write_text("host secret\n")
    system = _layer(_mini_system(), gz=True)
    app = _layer(
        [
            ("dir", "app", None),
            ("file", "app/answer.txt", "from the image\n"),
            ("file", "etc/os-release", "ID=mini\n"),
            # links an image may carry: followed on the host they would bind host dirs in
            ("sym", "opt", str(outside)),
            ("sym", "srv", "../../../../" + str(outside).lstrip("/")),
            ("sym", "lib32", str(outside)),
            ("sym", "libx32", "../" * 8 + str(outside).lstrip("/")),
        ]
    )
    tarball = oci_layout(tmp_path / "mini.tar", [system, app])
    sb.reset_configuration()
    sb.configure(backend="bwrap", sandbox_root=tmp_path / "root")
    task = f"tarball-{os.getpid()}"
    register_task_env_overrides(task, {"rootfs": str(tarball), "cwd": "/app"})
    try:
        box = sb.get_sandbox(task)
        out = box.execute(
            "cat answer.txt /etc/os-release; { echo x > answer.txt; } 2>/dev/null || echo read-only; "
            "cat /opt/key /srv/key /lib32/key /libx32/key 2>/dev/null || echo no-host-files; echo w > /tmp/f && cat /tmp/f",
            30,
        )
        assert out.output == "from the image\nID=mini\nread-only\nno-host-files\nw\n", out.output
        assert (outside / "key").read_text() == "host secret\n"
    finally:
        clear_task_env_overrides(task)
        sb.shutdown()
        sb.reset_configuration()
