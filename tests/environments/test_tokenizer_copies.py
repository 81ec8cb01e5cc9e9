"""TokenizerCopies: at most ``size`` copies, each with one worker at a time, handed on in order."""

from __future__ import annotations

import asyncio

import pytest

from environments.tokenizer_copies import UNCOPYABLE, TokenizerCopies

pytestmark = pytest.mark.timeout(30)


class Source:
    """Stands in for a tokenizer: counts how often it was copied."""

    copied = 0

    def __deepcopy__(self, memo: dict) -> Source:
        Source.copied += 1
        return Source()


async def test_copies_are_made_up_to_the_size_then_the_next_worker_waits_for_one_given_back() -> None:
    Source.copied = 0
    source = Source()
    copies = TokenizerCopies(source, size=2)
    a, b = await copies.acquire(), await copies.acquire()
    assert a is not b and source not in (a, b) and Source.copied == 2
    third = asyncio.ensure_future(copies.acquire())
    await asyncio.sleep(0.01)
    assert not third.done() and Source.copied == 2  # no third copy
    copies.release(b)
    assert await third is b
    copies.release(a)
    assert await copies.acquire() is a  # idle copies are reused, not remade
    assert copies.made == 2 and Source.copied == 2


async def test_a_waiter_cancelled_just_after_it_was_handed_a_copy_passes_it_on() -> None:
    copies = TokenizerCopies(Source(), size=1)
    only = await copies.acquire()
    first = asyncio.ensure_future(copies.acquire())
    second = asyncio.ensure_future(copies.acquire())
    await asyncio.sleep(0.01)
    copies.release(only)  # handed to `first`...
    first.cancel()  # ...which is cancelled before it runs again
    with pytest.raises(asyncio.CancelledError):
        await first
    assert await asyncio.wait_for(second, 1) is only  # not lost with the cancelled waiter


async def test_a_tokenizer_that_cannot_be_copied_says_so_and_is_not_tried_again() -> None:
    class Stubborn:
        tries = 0

        def __deepcopy__(self, memo: dict) -> None:
            Stubborn.tries += 1
            raise TypeError("no copies of me")

    copies = TokenizerCopies(Stubborn(), size=3)
    assert await copies.acquire() is UNCOPYABLE
    assert await copies.acquire() is UNCOPYABLE and Stubborn.tries == 1


async def test_no_tokenizer_gives_none_copies() -> None:
    copies = TokenizerCopies(None, size=2)
    assert await copies.acquire() is None
