"""A chat rendering's tokens, encoded piece by piece between added tokens, with pieces seen before reused.

Every rollout's rendering starts with the same system prompt and tool schemas. In the P2
bench they are ~6 KB of a ~6.5 KB rendering, and the tokenizer encoded them again for each
rollout: ~4 ms of the ~12 ms a rollout's trainer tokens took on the 2-core bench box.

Why piecewise is exact: a fast tokenizer first cuts its input at its *non-normalized* added
tokens (``<|im_start|>``, ``<|im_end|>``, ...), matched leftmost-longest. Every piece between
them is then normalised, pre-tokenised and encoded on its own. So the whole text's encoding
is its pieces' encodings in order, with those added tokens between them, provided that:

* we cut where the tokenizer cuts (all of its non-normalized added tokens, longest first);
* no such token strips whitespace from its neighbours (``lstrip``/``rstrip``) or matches only
  as a whole word (``single_word``): both look across the cut;
* no step depends on a piece's place in the text (a Metaspace pre-tokenizer that prepends
  ``▁`` to the first piece only).

The first two are read off the tokenizer. For the rest, each tokenizer's first use encodes a
probe text, and then its first real rendering, both ways. Any difference (ids or offsets)
and that tokenizer gets whole-text encodings from then on, with one warning.
``HERMES_PIECE_TOKENS=0`` turns it off (whole renderings only; same tokens, more CPU).
Tests: ``tests/environments/test_piece_tokens.py`` (the oracle is the tokenizer's own encoding
of the whole text) and ``tests/data/test_phase1_masks.py`` (atroposlib's ``tokenize_for_trainer``).
"""

from __future__ import annotations

import logging
import os
import re
import threading
import weakref
from array import array
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

logger = logging.getLogger(__name__)

OPT_OUT_VAR = "HERMES_PIECE_TOKENS"

# Pieces shorter than this are encoded each time: a dict look-up saves little on them, and a
# rollout's own turns (unique, many of them short) would only churn the cache.
MIN_CACHED_CHARS = 256
# Nor are huge ones kept (a multi-megabyte tool output is seen once).
MAX_CACHED_PIECE_CHARS = 200_000
# Every this many renderings, one is also encoded whole and compared (a tokenizer changed in
# place, e.g. an added token's flags, would show here; the first rendering is always compared).
CHECK_EVERY = 64
# The cache's bound per tokenizer, in characters of cached text (~3.5 MB of arrays at the
# bench's ~3 characters a token; a tokenizer copy per worker has its own).
CACHE_CHARS = 1_000_000


class _Piece:
    """One piece's token ids and where each token starts, relative to the piece."""

    __slots__ = ("ids", "starts", "_first_at")

    def __init__(self, ids: Sequence[int], starts: list[int]) -> None:
        self.ids = array("l", ids)
        self.starts = array("l", starts)
        self._first_at: dict[int, int] | None = None
        if starts != sorted(starts):  # never seen; a look-up table then, first token at each start wins
            self._first_at = {}
            for index in range(len(self.starts) - 1, -1, -1):
                self._first_at[self.starts[index]] = index

    def first_token_at(self, offset: int) -> int | None:
        if self._first_at is not None:
            return self._first_at.get(offset)
        index = bisect_left(self.starts, offset)
        return index if index < len(self.starts) and self.starts[index] == offset else None


class RenderingTokens:
    """A rendering's token ids, and for a character position the first token starting there."""

    def __init__(self, text_length: int) -> None:
        self.ids: list[int] = []
        self.text_length = text_length
        self._bases: list[int] = []  # where each piece starts in the text
        self._first_index: list[int] = []  # the index of each piece's first token
        self._pieces: list[_Piece] = []

    def add(self, base: int, piece: _Piece) -> None:
        self._bases.append(base)
        self._first_index.append(len(self.ids))
        self._pieces.append(piece)
        self.ids.extend(piece.ids)

    def first_token_at(self, position: int) -> int | None:
        """The index of the first token that starts at ``position`` (the number of tokens
        before it); ``len(ids)`` at the end of the text; None when no token starts there."""
        if position == self.text_length:
            return len(self.ids)
        k = bisect_right(self._bases, position) - 1
        if k < 0:
            return None
        index = self._pieces[k].first_token_at(position - self._bases[k])
        return None if index is None else self._first_index[k] + index

    def starts(self) -> list[int]:
        """Every token's start in the text (for comparing two encodings)."""
        out: list[int] = []
        for base, piece in zip(self._bases, self._pieces):
            out.extend(base + s for s in piece.starts)
        return out

    def same_as(self, other: RenderingTokens) -> bool:
        """The same ids, each starting at the same character."""
        return self.ids == other.ids and self.starts() == other.starts()


def _batch_encode(backend: Any, texts: list[str]) -> list[Any]:
    """``encode_batch`` lets go of the GIL while the tokenizer works, but only while the
    tokenizers library runs single-threaded (our default, ``apply_offline_defaults``): its
    thread pool, once used, makes every later fork print a warning, and sandboxes fork all
    the time. Otherwise one ``encode`` per text."""
    if os.environ.get("TOKENIZERS_PARALLELISM", "").strip().lower() in ("false", "0", "off", "no"):
        return list(backend.encode_batch(texts, add_special_tokens=False))
    return [backend.encode(text, add_special_tokens=False) for text in texts]


def _piece_of(encoding: Any) -> _Piece:
    return _Piece(encoding.ids, [start for start, _end in encoding.offsets])


def whole_text(backend: Any, text: str) -> RenderingTokens:
    """The tokenizer's own encoding of the whole text, as :class:`RenderingTokens`."""
    out = RenderingTokens(len(text))
    out.add(0, _piece_of(_batch_encode(backend, [text])[0]))
    return out


class PieceEncoder:
    """Encodes renderings for one tokenizer backend; see the module's docstring."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.fingerprint = _fingerprint(backend)
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, _Piece] = OrderedDict()
        self._cached_chars = 0
        self._renderings = 0  # renderings encoded; every CHECK_EVERY-th (the first included) is compared
        self._cut, self._added_ids, why_not = _cut_points(backend)
        self._added_pieces = {content: _Piece([token_id], [0]) for content, token_id in self._added_ids.items()}
        if self._cut is not None and not self._agrees(_probe_text(list(self._added_ids))):
            self._cut, why_not = None, "its encoding of a probe text differs when encoded piece by piece"
        self.why_whole_text = why_not

    @property
    def piecewise(self) -> bool:
        return self._cut is not None

    def encode(self, text: str) -> RenderingTokens:
        with self._lock:
            if self._cut is None:
                return whole_text(self.backend, text)
            out = self._pieces(text)
            self._renderings += 1
            if self._renderings % CHECK_EVERY == 1:
                whole = whole_text(self.backend, text)
                if not whole.same_as(out):
                    self._disable("its encoding of a rendering differs when encoded piece by piece")
                    return whole
            return out

    def cached_pieces(self) -> int:
        return len(self._cache)

    # ------------------------------------------------------------------ internals

    def _disable(self, why: str) -> None:
        self._cut, self.why_whole_text = None, why
        self._cache.clear()
        self._cached_chars = 0
        logger.warning("tokenizer: %s; encoding whole renderings from now on (slower, same tokens)", why)

    def _agrees(self, text: str) -> bool:
        return whole_text(self.backend, text).same_as(self._pieces(text, remember=False))

    def _pieces(self, text: str, remember: bool = True) -> RenderingTokens:
        assert self._cut is not None
        parts: list[tuple[int, str, _Piece | None]] = []  # (where, text, the added token's piece or None)
        at = 0
        for match in self._cut.finditer(text):
            if match.start() > at:
                parts.append((at, text[at : match.start()], None))
            parts.append((match.start(), match.group(), self._added_pieces[match.group()]))
            at = match.end()
        if at < len(text):
            parts.append((at, text[at:], None))
        found: dict[str, _Piece] = {}
        missing: dict[str, None] = {}  # in order, each once
        for _where, part, added in parts:
            if added is not None or part in found or part in missing:
                continue
            cached = self._cache.get(part)
            if cached is None:
                missing[part] = None
            else:
                self._cache.move_to_end(part)
                found[part] = cached
        if missing:
            for part, encoding in zip(missing, _batch_encode(self.backend, list(missing))):
                piece = found[part] = _piece_of(encoding)
                if remember and MIN_CACHED_CHARS <= len(part) <= MAX_CACHED_PIECE_CHARS:
                    self._remember(part, piece)
        out = RenderingTokens(len(text))
        for where, part, added in parts:
            out.add(where, added if added is not None else found[part])
        return out

    def _remember(self, part: str, piece: _Piece) -> None:
        self._cache[part] = piece
        self._cached_chars += len(part)
        while self._cached_chars > CACHE_CHARS and self._cache:
            old, _ = self._cache.popitem(last=False)
            self._cached_chars -= len(old)


def _fingerprint(backend: Any) -> tuple[int, int] | None:
    """What changes when tokens are added (cheap: ``get_vocab_size(with_added_tokens=True)``
    walks the vocabulary, ~70 µs)."""
    try:
        return int(backend.get_vocab_size(with_added_tokens=False)), len(backend.get_added_tokens_decoder())
    except Exception:  # noqa: BLE001 - an odd backend: a new encoder each time, whole-text encodings
        return None


def _cut_points(backend: Any) -> tuple[re.Pattern[str] | None, dict[str, int], str | None]:
    """The pattern of the tokenizer's non-normalized added tokens, longest first (where it
    cuts its input), their ids, and why not when they cannot be used."""
    try:
        added = backend.get_added_tokens_decoder()
    except Exception:  # noqa: BLE001
        return None, {}, "it does not list its added tokens"
    cut = {token.content: token_id for token_id, token in added.items() if not token.normalized and token.content}
    if not cut:
        return None, {}, "it has no added tokens to cut at"
    for token in added.values():
        if not token.normalized and (token.lstrip or token.rstrip or token.single_word):
            return None, {}, f"its added token {token.content!r} strips whitespace or matches whole words only"
    if _prepends_to_the_first_piece_only(backend):
        return None, {}, "its pre-tokenizer prepends to the text's first piece only (Metaspace, prepend_scheme first)"
    pattern = re.compile("|".join(re.escape(content) for content in sorted(cut, key=len, reverse=True)))
    return pattern, cut, None


def _prepends_to_the_first_piece_only(backend: Any) -> bool:
    try:
        state = backend.pre_tokenizer.__getstate__() if backend.pre_tokenizer is not None else b""
    except Exception:  # noqa: BLE001 - cannot tell: the probe and the first rendering decide
        return False
    return b'"prepend_scheme":"first"' in (state if isinstance(state, bytes) else str(state).encode())


def _probe_text(added: list[str]) -> str:
    """Text that shows a tokenizer whose pieces depend on their neighbours or their place:
    pieces with and without leading and trailing spaces and newlines, text before the
    first added token and after the last, two added tokens side by side."""
    marks = (added * 3)[:3]
    return (
        f"Hello world{marks[0]}  leading spaces\n\n{marks[1]}\nnew line first "
        f"{marks[2]}{marks[0]}tail — naïve café 🙂 x=1;\ty  {marks[1]} end"
    )


_encoders: weakref.WeakKeyDictionary[Any, PieceEncoder] = weakref.WeakKeyDictionary()
_encoders_lock = threading.Lock()


def encode_rendering(tokenizer: Any, text: str) -> RenderingTokens:
    """``text`` (a chat template's rendering) encoded with ``tokenizer``'s fast backend,
    without special tokens added: the ids ``apply_chat_template(tokenize=True)`` gives.
    The pieces between added tokens come from a per-tokenizer cache when seen before."""
    backend = tokenizer.backend_tokenizer
    if os.environ.get(OPT_OUT_VAR, "").strip().lower() in ("0", "false", "off", "no"):
        return whole_text(backend, text)
    with _encoders_lock:
        encoder = _encoders.get(tokenizer)
        if encoder is None or encoder.backend is not backend or encoder.fingerprint != _fingerprint(backend):
            try:
                encoder = PieceEncoder(backend)
                _encoders[tokenizer] = encoder
            except TypeError:  # a tokenizer that cannot be weakly referenced: no cache for it
                return whole_text(backend, text)
    return encoder.encode(text)
