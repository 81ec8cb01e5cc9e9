"""The simulator's view of the shared local tokenizer, made cheap.

Uses the raw ``tokenizers.Tokenizer`` under the Hugging Face wrapper: it is
about twice as fast and does not mutate truncation state per call (which the
wrapper does, and which breaks when several threads share it). Encodings of
repeated texts (scripted replies, system prompts) are memoised.
"""

from __future__ import annotations

from typing import Any, cast

from environments.tokenizer import load_tokenizer, local_tokenizer_path


class _BoundedCache:
    """A dict that empties itself when full: cheaper than an LRU on the hot path,
    and single dict operations are atomic under the GIL (servers on several
    threads may share one tokenizer)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.data: dict[Any, Any] = {}

    def get(self, key: Any) -> Any:
        return self.data.get(key)

    def put(self, key: Any, val: Any) -> None:
        if len(self.data) >= self.size:
            self.data = {}
        self.data[key] = val


class SimTokenizer:
    def __init__(self, path: str | None = None) -> None:
        self.path = path or local_tokenizer_path()
        self.hf = load_tokenizer(self.path)
        self.fast = self.hf._tokenizer  # tokenizers.Tokenizer (Rust)
        self.eos_id: int = int(self.hf.eos_token_id)
        self.eos_token: str = str(self.hf.eos_token)
        self.bos_id: int | None = self.hf.bos_token_id
        self.vocab_size: int = len(self.hf)
        self._ids = _BoundedCache(16384)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no special tokens added). Do not mutate the result."""
        if len(text) > 4096:  # long tool outputs rarely repeat: don't let them fill the cache
            return cast(list[int], self.fast.encode(text, add_special_tokens=False).ids)
        ids = self._ids.get(text)
        if ids is None:
            ids = self.fast.encode(text, add_special_tokens=False).ids
            self._ids.put(text, ids)
        return cast(list[int], ids)

    def count(self, text: str) -> int:
        return len(self.encode(text)) if text else 0

    def decode(self, ids: list[int]) -> str:
        return str(self.fast.decode(ids, skip_special_tokens=False))

    def token_text(self, token_id: int) -> str:
        return str(self.fast.decode([token_id], skip_special_tokens=False))
