"""A small, fully local tokenizer, built on first use and cached.

atroposlib loads ``AutoTokenizer.from_pretrained(config.tokenizer_name)`` in
``BaseEnv.__init__`` and again in the vLLM/SGLang servers. Its default is a Hub
repo, which would hang offline. Our configs default to this local directory
instead: a byte-level BPE (every string round-trips) with a ChatML template
that understands ``tools``, assistant ``tool_calls``, ``reasoning_content`` and
``role: tool``, so Phase 2 token ids are real and consistent between the
environments and the embedded simulator.

The directory is built with the installed ``transformers``/``tokenizers`` (a
directory saved by transformers 5 does not load in 4, so we never ship one)
and keyed by their versions.
"""

from __future__ import annotations

import fcntl
import os
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

FORMAT_VERSION = "2"

# Jinja chat template (ChatML + Hermes tool calls). Kept readable on purpose:
# env authors look at it when a rendered prompt surprises them.
CHAT_TEMPLATE = """
{%- set sys_msg = messages[0]['content'] if messages and messages[0]['role'] == 'system' else none -%}
{%- if tools or sys_msg is not none -%}
<|im_start|>system
{% if sys_msg is not none %}{{ sys_msg }}{% endif %}
{%- if tools %}{% if sys_msg is not none %}

{% endif %}You can call functions. Put each call in its own <tool_call></tool_call> block as JSON with "name" and "arguments".
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools>{% endif %}<|im_end|>
{% endif -%}
{%- for message in messages -%}
{%- if message['role'] == 'system' -%}
{%- elif message['role'] == 'assistant' -%}
<|im_start|>assistant
{% if message.get('reasoning_content') %}<think>{{ message['reasoning_content'] }}</think>
{% endif %}{% if message.get('content') %}{{ message['content'] }}{% endif %}
{%- if message.get('tool_calls') %}{% for tc in message['tool_calls'] %}
<tool_call>{"name": "{{ tc['function']['name'] }}", "arguments": {{ tc['function']['arguments'] if tc['function']['arguments'] is string else tc['function']['arguments'] | tojson }}}</tool_call>{% endfor %}{% endif %}<|im_end|>
{% elif message['role'] == 'tool' -%}
<|im_start|>tool
{{ message['content'] }}<|im_end|>
{% else -%}
<|im_start|>{{ message['role'] }}
{{ message['content'] if message['content'] is string else message['content'] | tojson }}<|im_end|>
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif -%}
"""

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<pad>"]
EXTRA_TOKENS = ["<tool_call>", "</tool_call>", "<think>", "</think>"]

# A little English, shell and JSON so common pieces merge into real tokens
# (token counts in the console then look like a real model's, roughly).
_CORPUS = [
    "You are a careful assistant working in a Linux terminal. Use the tools to inspect and change files.",
    'Create a file named notes.txt containing the word hello. {"name": "terminal", "arguments": {"command": "ls -la"}}',
    '{"name": "write_file", "arguments": {"path": "answer.txt", "content": "42\\n"}}',
    '{"name": "read_file", "arguments": {"path": "data.csv", "offset": 1, "limit": 50}}',
    "cat answer.txt; grep -c error log.txt; wc -l data.csv; echo done > status.txt; sort -u names.txt",
    "The task is complete. I wrote the result to the file and verified it with cat.",
    "Let me think about this step by step. First I will look at the directory listing.",
    "import sys\ndef main():\n    print('hello world')\nif __name__ == '__main__':\n    main()\n",
    "exit_code output error stdout stderr command timeout path content arguments function",
    "The quick brown fox jumps over the lazy dog. 0123456789 {}[]()<>:;,.!?'\"`~@#$%^&*-_=+|\\/",
]


def _cache_root() -> Path:
    base = os.environ.get("HERMES_CONSOLE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "hermes-console"
    )
    return Path(base)


def _versions_key() -> str:
    import tokenizers
    import transformers

    return f"tf{transformers.__version__}-tk{tokenizers.__version__}-f{FORMAT_VERSION}"


def build_tokenizer(out_dir: Path) -> Path:
    """Train the BPE and save a Hugging Face tokenizer directory at ``out_dir``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1024,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(_CORPUS * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token="<|endoftext|>",
        eos_token="<|im_end|>",
        pad_token="<pad>",
        additional_special_tokens=["<|im_start|>"],
    )
    # Tool-call markers are ordinary (non-special) added tokens: they survive
    # decode(skip_special_tokens=True), as they do in real Hermes tokenizers.
    fast.add_tokens(EXTRA_TOKENS)
    fast.chat_template = CHAT_TEMPLATE
    out_dir.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(out_dir))
    return out_dir


@cache
def local_tokenizer_path() -> str:
    """Path of the cached local tokenizer directory, building it if needed.

    Safe under concurrent first use from several processes (file lock).
    """
    target = _cache_root() / f"tiny-tokenizer-{_versions_key()}"
    if (target / "tokenizer.json").exists():
        return str(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".tokenizer.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / "tokenizer.json").exists():
            tmp = target.with_name(target.name + f".tmp{os.getpid()}")
            build_tokenizer(tmp)
            os.replace(tmp, target)
    return str(target)


@lru_cache(maxsize=4)
def load_tokenizer(path: str | None = None) -> Any:  # a PreTrainedTokenizerBase (transformers is untyped here)
    """Load (and memoise) a tokenizer from a local directory; defaults to ours."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path or local_tokenizer_path())


def chat_token_ids(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = False,
) -> list[int]:
    """``apply_chat_template`` that returns a plain ``list[int]`` on transformers 4 and 5."""
    out = tokenizer.apply_chat_template(
        messages,
        tools=tools or None,
        tokenize=True,
        add_generation_prompt=add_generation_prompt,
        return_dict=False,
    )
    if hasattr(out, "input_ids"):
        out = out["input_ids"]
    return list(out)
