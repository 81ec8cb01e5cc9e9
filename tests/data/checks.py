"""Independent checks of trainer data, written apart from the code under test."""

from __future__ import annotations

from typing import Any


def trained_runs(masks: list[int]) -> list[tuple[int, int]]:
    """[start, end) of each maximal run of trained (mask != -100) positions."""
    runs: list[tuple[int, int]] = []
    start = None
    for i, mask in enumerate(list(masks) + [-100]):
        if mask != -100 and start is None:
            start = i
        elif mask == -100 and start is not None:
            runs.append((start, i))
            start = None
    return runs


def assert_rollout_trains_only_assistant_text(
    tokenizer: Any, tokens: list[int], masks: list[int], messages: list[dict[str, Any]]
) -> list[str]:
    """Every assistant turn has trained text, no tool/user/system text or role header is trained.

    Returns the decoded trained runs."""
    assert len(tokens) == len(masks)
    assert all(m == -100 or m == t for t, m in zip(tokens, masks)), "a trained mask differs from its token"
    texts = [tokenizer.decode(tokens[a:b], skip_special_tokens=False) for a, b in trained_runs(masks)]
    assistants = [m for m in messages if m["role"] == "assistant"]
    assert len(texts) == len(assistants), (len(texts), len(assistants), texts)
    trained = "".join(texts)
    assert "<|im_start|>" not in trained
    said = " ".join(str(m.get("content") or "") + str(m.get("reasoning_content") or "") for m in assistants)
    for msg in messages:
        content = msg.get("content")
        if msg["role"] in ("tool", "user", "system") and isinstance(content, str) and len(content.strip()) >= 6:
            if content.strip() in said:
                continue  # the model quoted it (e.g. restating the task): that text is its own
            assert content.strip() not in trained, f"{msg['role']} text is trained: {content[:80]!r}"
    for text, msg in zip(texts, assistants):
        body = (msg.get("content") or "").strip()
        assert body in text
        assert text.rstrip("\n").endswith("<|im_end|>") or text.endswith(tokenizer.eos_token)
    return texts
