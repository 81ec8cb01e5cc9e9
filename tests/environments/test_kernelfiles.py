"""kernelfiles: the few-syscall readers behind every /proc and cgroupfs read of a command."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from environments.sandboxes.kernelfiles import Rereadable, read_all, read_record


def test_a_record_and_a_whole_file_read_as_open_does(tmp_path: Path) -> None:
    stat = read_record(f"/proc/{os.getpid()}/stat")
    assert stat is not None and stat.startswith(f"{os.getpid()} (".encode())
    big = tmp_path / "big"
    big.write_bytes(b"x" * 300_000 + b"END")
    assert read_all(str(big)) == big.read_bytes()
    assert read_all(str(big), limit=10) == b"x" * 10
    environ = read_all(f"/proc/{os.getpid()}/environ")
    assert environ is not None and Path(f"/proc/{os.getpid()}/environ").read_bytes() == environ


def test_missing_files_read_as_none(tmp_path: Path) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert read_record(f"/proc/{gone.pid}/stat") is None
    assert read_all(str(tmp_path / "nope")) is None
    assert Rereadable(str(tmp_path / "nope")).read() is None


def test_a_kept_file_reads_its_current_content_every_time(tmp_path: Path) -> None:
    counter = tmp_path / "events"
    counter.write_text("max 0\n")
    kept = Rereadable(str(counter))
    assert kept.read() == b"max 0\n"
    counter.write_text("max 12\n")  # same inode, rewritten in place
    assert kept.read() == b"max 12\n"
    uptime = Rereadable("/proc/uptime")  # a seq_file renders afresh on a read from offset 0
    first = uptime.read()
    os.sched_yield()
    assert first is not None and float(uptime.read().split()[0]) >= float(first.split()[0])  # type: ignore[union-attr]
    kept.close()
    assert kept.read() is None  # closed with its owner: never reopened
    uptime.close()


def test_uptime_is_the_clock_of_process_start_times() -> None:
    """Start times in stat count clock ticks since boot; ``uptime_s`` (no file read now)
    must be that same clock, or new processes would look older than the sandbox."""
    from environments.sandboxes import procfs

    child = subprocess.Popen(["sleep", "5"])
    try:
        st = procfs.read_stat(child.pid)
        assert st is not None
        now = procfs.now_ticks()
        assert 0 <= now - st.start_ticks <= 100  # started within the last second
        assert abs(procfs.uptime_s() - float(Path("/proc/uptime").read_text().split()[0])) < 1.0
    finally:
        child.kill()
        child.wait()
