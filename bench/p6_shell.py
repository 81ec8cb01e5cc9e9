"""P6 shell: CPU and forks per ``terminal`` command, spawn-per-call (old) vs persistent shell (new).

    python -m bench.p6_shell [--n 200] [--rev 93482cd]

"old" is the sandbox package as of ``--rev`` (the last spawn-per-call commit), exported
with ``git archive`` into a temp dir and run in a child process; "new" is this checkout.
Each side: one sandbox per backend (local, bwrap), a warm-up command, then ``n`` commands
(``echo hi``, and ``ls >/dev/null`` which needs one exec). CPU = console process (user+sys)
+ sandbox processes: reaped children (RUSAGE_CHILDREN) for old, plus the live machine's
own and reaped-children times from /proc for new (its shell is still running).
Forks = the system-wide ``processes`` counter of /proc/stat (noisy on a shared box: a
median of 3 rounds, and it counts other users' forks too).
"""

from __future__ import annotations

import argparse
from typing import Any

from bench.common import REPO, median, old_package_dir, run_child_result

_CHILD = r"""
import json, os, resource, sys, tempfile
from environments.sandboxes.settings import SandboxSettings
from environments.sandboxes import procfs
backend, n, cmd = sys.argv[1], int(sys.argv[2]), sys.argv[3]
if backend == "local":
    from environments.sandboxes.local import LocalSandbox as C
else:
    from environments.sandboxes.bwrap import BwrapSandbox as C
tck = os.sysconf("SC_CLK_TCK")
def forks():
    for line in open("/proc/stat"):
        if line.startswith("processes "):
            return int(line.split()[1])
def live_cpu(box):
    roots = {m.pid for m in (getattr(box, "_machine", None), getattr(box, "_vmachine", None)) if m is not None}
    total = 0
    for pid in procfs.sandbox_processes(None, (), roots):
        try:
            f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(x) for x in f[11:15])  # utime stime cutime cstime
    return total / tck
box = C("bench", SandboxSettings(sandbox_root=tempfile.mkdtemp()))
box.execute("true", 30)
s0, c0, l0, f0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN), live_cpu(box), forks()
for _ in range(n):
    box.execute(cmd, 30)
s1, c1, l1, f1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN), live_cpu(box), forks()
box.cleanup()
host = (s1.ru_utime + s1.ru_stime) - (s0.ru_utime + s0.ru_stime)
kids = (c1.ru_utime + c1.ru_stime) - (c0.ru_utime + c0.ru_stime) + (l1 - l0)
print("RESULT" + json.dumps({"host_ms": 1000 * host / n, "sandbox_ms": 1000 * kids / n, "forks": (f1 - f0) / n}))
"""


def _run(pythonpath: str, backend: str, n: int, cmd: str) -> dict[str, float]:
    return run_child_result(_CHILD, [backend, str(n), cmd], pythonpath)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rev", default="93482cd")
    args = ap.parse_args(argv)
    old_dir = old_package_dir(args.rev)
    rows: dict[str, Any] = {}
    for backend in ("local", "bwrap"):
        for cmd in ("echo hi", "ls >/dev/null"):
            for side, path in (("old", old_dir), ("new", str(REPO))):
                runs = [_run(path, backend, args.n, cmd) for _ in range(args.rounds)]
                rows[f"{backend} | {cmd} | {side}"] = {k: round(median([r[k] for r in runs]), 3) for k in runs[0]}
    print(f"{'backend | command | side':36} {'host ms':>9} {'sandbox ms':>11} {'total ms':>9} {'forks':>6}")
    for key, r in rows.items():
        total = r["host_ms"] + r["sandbox_ms"]
        print(f"{key:36} {r['host_ms']:9.2f} {r['sandbox_ms']:11.2f} {total:9.2f} {r['forks']:6.1f}")
    return rows


if __name__ == "__main__":
    main()
