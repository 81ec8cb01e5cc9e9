"""procfs.SharedReading: concurrent cleanups share one look at the host's processes, and
none of them ever gets a look taken before it asked (a process that escaped its group just
before the cleanup's kill would otherwise be missed)."""

from __future__ import annotations

import threading
import time

import pytest

from environments.sandboxes.procfs import SharedReading

pytestmark = pytest.mark.timeout(30)


class _Gated:
    """A reading that blocks until released; each reading returns its own number."""

    def __init__(self) -> None:
        self.count = 0
        self.entered = threading.Semaphore(0)
        self.release = threading.Semaphore(0)
        self.fail_next = False

    def __call__(self) -> int:
        self.count += 1
        n = self.count
        self.entered.release()
        assert self.release.acquire(timeout=10)
        if self.fail_next:
            self.fail_next = False
            raise OSError("reading failed")
        return n


def _call(shared: SharedReading[int], out: dict[str, object], key: str) -> threading.Thread:
    def run() -> None:
        try:
            out[key] = shared.fresh()
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            out[key] = exc

    t = threading.Thread(target=run)
    t.start()
    return t


def _waiting(shared: SharedReading[int], n: int) -> None:
    """Until ``n`` threads wait on the reading (white-box: the condition's waiters)."""
    end = time.monotonic() + 5
    while len(shared._cond._waiters) < n:  # type: ignore[attr-defined]
        assert time.monotonic() < end
        time.sleep(0.001)


def test_callers_during_a_reading_share_the_next_one_not_that_one() -> None:
    gated = _Gated()
    shared = SharedReading(gated)
    out: dict[str, object] = {}
    first = _call(shared, out, "first")
    assert gated.entered.acquire(timeout=5)  # reading 1 is under way
    late = [_call(shared, out, f"late{i}") for i in range(5)]
    _waiting(shared, 5)
    gated.release.release()  # reading 1 ends: it is too old for the late callers
    assert gated.entered.acquire(timeout=5)  # so one of them takes reading 2
    gated.release.release()
    for t in [first, *late]:
        t.join(10)
    assert out == {"first": 1, **{f"late{i}": 2 for i in range(5)}}
    assert gated.count == 2 and shared.readings == 2


def test_a_caller_alone_reads_every_time() -> None:
    calls = []
    shared = SharedReading(lambda: calls.append(1) or len(calls))
    assert [shared.fresh() for _ in range(3)] == [1, 2, 3]


def test_a_failed_reading_fails_its_taker_and_a_waiter_takes_another() -> None:
    gated = _Gated()
    shared = SharedReading(gated)
    out: dict[str, object] = {}
    first = _call(shared, out, "first")
    assert gated.entered.acquire(timeout=5)
    waiter = _call(shared, out, "waiter")
    _waiting(shared, 1)
    gated.fail_next = True
    gated.release.release()  # reading 1 fails
    assert gated.entered.acquire(timeout=5)  # the waiter takes reading 2
    gated.release.release()
    first.join(10)
    waiter.join(10)
    assert isinstance(out["first"], OSError) and out["waiter"] == 2
