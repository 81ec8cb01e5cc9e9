"""An independent oracle for sandbox tests: which processes are alive, read from /proc.

(Imported by basename: pytest puts this directory on sys.path for its test modules.)"""

from __future__ import annotations

import os
import time


def live_pids_with(fingerprint: str) -> list[int]:
    """Non-zombie processes whose command line contains ``fingerprint``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{name}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if fingerprint in cmd and state not in ("Z", "X"):
            found.append(int(name))
    return found


def wait_until_gone(fingerprint: str, within: float = 30.0) -> list[int]:
    """Poll until no process carries ``fingerprint`` (or ``within`` passes); the survivors.
    The bound is generous: on a loaded machine a killed process can take seconds to be reaped,
    and the poll returns as soon as the processes are gone."""
    end = time.monotonic() + within
    while True:
        pids = live_pids_with(fingerprint)
        if not pids or time.monotonic() > end:
            return pids
        time.sleep(0.02)
