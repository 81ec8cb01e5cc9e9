"""TokenizerCopies: calls in worker threads, each with a copy no other call holds meanwhile;
at most ``size`` copies, made on the loop; a worker goes from one call to the next without
the loop."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from environments.tokenizer_copies import TokenizerCopies

pytestmark = pytest.mark.timeout(30)


class Source:
    """Stands in for a tokenizer: counts its copies and who made them."""

    copied = 0
    copied_on: set[int] = set()

    def __deepcopy__(self, memo: dict) -> Source:
        Source.copied += 1
        Source.copied_on.add(threading.get_ident())
        return Source()


def _reset() -> None:
    Source.copied = 0
    Source.copied_on = set()


async def test_calls_run_in_workers_each_with_a_copy_no_other_call_holds() -> None:
    _reset()
    source = Source()
    copies = TokenizerCopies(source, size=2)
    lock = threading.Lock()
    holding: dict[int, int] = {}
    seen = {"shared": 0, "most": 0, "threads": set(), "copies": set()}

    def work(n: int, tokenizer: Source) -> int:
        with lock:
            holding[id(tokenizer)] = holding.get(id(tokenizer), 0) + 1
            seen["shared"] += holding[id(tokenizer)] > 1
            seen["most"] = max(seen["most"], sum(holding.values()))
            seen["threads"].add(threading.get_ident())
            seen["copies"].add(id(tokenizer))
        time.sleep(0.02)
        with lock:
            holding[id(tokenizer)] -= 1
        assert tokenizer is not source
        return n * 2

    results = await asyncio.gather(*(copies.run(work, n) for n in range(12)))
    assert results == [n * 2 for n in range(12)]
    assert seen["shared"] == 0 and seen["most"] == 2
    assert threading.get_ident() not in seen["threads"]  # never on the loop
    assert len(seen["copies"]) == 2 and copies.made == 2 and Source.copied == 2
    assert Source.copied_on == {threading.get_ident()}  # copies are made on the loop, not in workers
    copies.close()


async def test_copies_are_made_only_when_every_one_may_be_in_use() -> None:
    _reset()
    copies = TokenizerCopies(Source(), size=4)
    for n in range(5):  # one call at a time: one copy is enough
        assert await copies.run(lambda x, tok: x, n) == n
    assert copies.made == 1 and Source.copied == 1
    copies.close()


async def test_a_worker_takes_the_next_call_without_the_loop() -> None:
    """The loop is blocked while calls queue: the one worker still goes through all of them
    (copies handed over by the loop waited for it: BENCHMARKS.md, session 27)."""
    copies = TokenizerCopies(Source(), size=1)
    done: list[float] = []

    def work(n: int, tokenizer: Source) -> int:
        done.append(time.monotonic())
        return n

    calls = [asyncio.ensure_future(copies.run(work, n)) for n in range(5)]
    await asyncio.sleep(0)  # every call submitted
    started = time.monotonic()
    while len(done) < 5 and time.monotonic() - started < 5:
        time.sleep(0.001)  # the loop does nothing else meanwhile
    assert len(done) == 5
    assert await asyncio.gather(*calls) == list(range(5))
    copies.close()


async def test_a_cancelled_call_that_has_not_started_never_runs_and_gives_nothing_up() -> None:
    copies = TokenizerCopies(Source(), size=1)
    gate = threading.Event()
    ran: list[int] = []

    def work(n: int, tokenizer: Source) -> int:
        if n == 0:
            gate.wait(5)
        ran.append(n)
        return n

    first = asyncio.ensure_future(copies.run(work, 0))
    second = asyncio.ensure_future(copies.run(work, 1))
    await asyncio.sleep(0.05)
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
    gate.set()
    assert await first == 0
    assert await asyncio.wait_for(copies.run(work, 2), 5) == 2  # the copy was not lost
    assert ran == [0, 2]
    copies.close()


async def test_a_tokenizer_that_cannot_be_copied_runs_on_the_loop_with_none_and_is_not_tried_again() -> None:
    class Stubborn:
        tries = 0

        def __deepcopy__(self, memo: dict) -> None:
            Stubborn.tries += 1
            raise TypeError("no copies of me")

    copies = TokenizerCopies(Stubborn(), size=3)
    where: list[tuple[int, object]] = []

    def work(tokenizer: object) -> str:
        where.append((threading.get_ident(), tokenizer))
        return "ok"

    assert await copies.run(work) == "ok"
    assert await copies.run(work) == "ok"
    assert copies.uncopyable and Stubborn.tries == 1
    assert where == [(threading.get_ident(), None)] * 2


async def test_a_later_copy_that_fails_leaves_the_pool_at_the_copies_it_has() -> None:
    class Flaky:
        made = 0

        def __deepcopy__(self, memo: dict) -> object:
            Flaky.made += 1
            if Flaky.made > 1:
                raise MemoryError("no room for another")
            return object()

    copies = TokenizerCopies(Flaky(), size=3)
    gate = threading.Event()

    def work(n: int, tokenizer: object) -> int:
        gate.wait(5)
        return n

    calls = [asyncio.ensure_future(copies.run(work, n)) for n in range(3)]
    await asyncio.sleep(0.05)
    gate.set()
    assert await asyncio.gather(*calls) == [0, 1, 2]
    assert copies.made == 1 and copies.size == 1 and not copies.uncopyable
    copies.close()


async def test_no_tokenizer_gives_none_copies_in_a_worker() -> None:
    copies = TokenizerCopies(None, size=2)
    assert await copies.run(lambda tok: tok) is None
    copies.close()


async def test_shutdown_stops_every_pools_workers_and_a_later_call_starts_new_ones() -> None:
    """A stopped runtime leaves no thread of the env layer running (runtime/host.py calls this)."""
    from environments.tokenizer_copies import shutdown_workers

    copies = TokenizerCopies(Source(), size=2)
    assert await asyncio.gather(*(copies.run(lambda n, tok: n, n) for n in range(4))) == [0, 1, 2, 3]
    assert any(t.name.startswith("hermes-tokens") for t in threading.enumerate())
    await asyncio.to_thread(shutdown_workers, True)
    assert not any(t.name.startswith("hermes-tokens") for t in threading.enumerate())
    assert await copies.run(lambda tok: "again") == "again"
    copies.close(wait=True)
    assert copies.made == 2  # the copies outlive the workers
