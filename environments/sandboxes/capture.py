"""Bounded output capture: keep the head and the tail, count what was dropped.

A command that prints 100 MB must cost us at most ``limit`` bytes of memory, and the
model still sees how the output started and how it ended.
"""

from __future__ import annotations


class BoundedOutput:
    def __init__(self, limit: int) -> None:
        if limit < 2:
            raise ValueError(f"output limit must be at least 2 bytes, got {limit}")
        self._head_cap = limit // 2
        self._tail_cap = limit - self._head_cap
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self._head_cap - len(self._head)
        if room > 0:
            self._head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self._tail += chunk
            # Trim lazily (at 2x) so a flood of small chunks is not quadratic.
            if len(self._tail) > 2 * self._tail_cap:
                del self._tail[: len(self._tail) - self._tail_cap]

    @property
    def dropped(self) -> int:
        return self.total - len(self._head) - min(len(self._tail), self._tail_cap)

    def text(self) -> str:
        tail = bytes(self._tail[-self._tail_cap :]) if self._tail else b""
        if self.dropped <= 0:
            return (bytes(self._head) + tail).decode("utf-8", errors="replace")
        note = f"\n[... output truncated: {self.dropped} of {self.total} bytes omitted ...]\n"
        return bytes(self._head).decode("utf-8", errors="replace") + note + tail.decode("utf-8", errors="replace")

    def peek_tail(self, limit: int) -> str:
        """The last ``limit`` bytes fed so far (decoded), for a live view of a running
        command. Safe to call from another thread: it only copies (never trims)."""
        if limit <= 0:
            return ""
        tail = bytes(self._tail[-limit:])
        if len(tail) < limit and self.total <= len(self._head) + len(self._tail):
            tail = (bytes(self._head) + tail)[-limit:]  # nothing dropped between head and tail
        # a cut multi-byte character at the start decodes to U+FFFD: drop it
        return tail.decode("utf-8", errors="replace").lstrip("\ufffd")
