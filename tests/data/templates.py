"""Chat templates used by the data-contract tests, built locally on the repo's tokenizer (no Hub).

* ``qwen``: Hermes/Qwen2.5 style ChatML, tool calls as ``\\n<tool_call>\\n{json}\\n</tool_call>``
  after the content, tool results as ``<tool_response>`` inside a user turn.
* ``llama3``: Llama-3 style headers (``<|start_header_id|>role<|end_header_id|>\\n\\n``, ``<|eot_id|>``),
  tool calls as ``{"name": ..., "parameters": ...}`` and tool results in an ``ipython`` turn.
"""

from __future__ import annotations

from typing import Any

QWEN_TEMPLATE = """
{%- if tools %}<|im_start|>system
{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}

{% endif %}# Tools
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools><|im_end|>
{% elif messages and messages[0]['role'] == 'system' %}<|im_start|>system
{{ messages[0]['content'] }}<|im_end|>
{% endif -%}
{%- for message in messages -%}
{%- if message['role'] == 'system' -%}
{%- elif message['role'] == 'assistant' -%}
<|im_start|>assistant
{% if message.get('reasoning_content') %}<think>
{{ message['reasoning_content'] }}
</think>

{% endif %}{{ message['content'] or '' }}
{%- for tc in message.get('tool_calls') or [] %}
<tool_call>
{"name": "{{ tc['function']['name'] }}", "arguments": {{ tc['function']['arguments'] }}}
</tool_call>
{%- endfor %}<|im_end|>
{% elif message['role'] == 'tool' -%}
<|im_start|>user
<tool_response>
{{ message['content'] }}
</tool_response><|im_end|>
{% else -%}
<|im_start|>{{ message['role'] }}
{{ message['content'] }}<|im_end|>
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif -%}
"""

LLAMA3_TEMPLATE = """
{{- bos_token }}
{%- if tools or (messages and messages[0]['role'] == 'system') %}<|start_header_id|>system<|end_header_id|>

{% if messages and messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}{% endif %}
{%- if tools %}
Tools: {% for tool in tools %}{{ tool['function']['name'] }} {% endfor %}{% endif %}<|eot_id|>
{%- endif %}
{%- for message in messages -%}
{%- if message['role'] == 'system' -%}
{%- elif message['role'] == 'assistant' -%}
<|start_header_id|>assistant<|end_header_id|>

{{ message['content'] or '' }}{% for tc in message.get('tool_calls') or [] %}{"name": "{{ tc['function']['name'] }}", "parameters": {{ tc['function']['arguments'] }}}{% endfor %}<|eot_id|>
{%- elif message['role'] == 'tool' -%}
<|start_header_id|>ipython<|end_header_id|>

{{ message['content'] }}<|eot_id|>
{%- else -%}
<|start_header_id|>{{ message['role'] }}<|end_header_id|>

{{ message['content'] }}<|eot_id|>
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>

{% endif -%}
"""


def templated_tokenizer(path: str, kind: str) -> Any:
    """A fresh copy of the local tokenizer carrying another family's chat template."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    if kind == "qwen":
        tok.chat_template = QWEN_TEMPLATE
    elif kind == "llama3":
        tok.add_special_tokens(
            {
                "additional_special_tokens": [
                    "<|start_header_id|>",
                    "<|end_header_id|>",
                    "<|eot_id|>",
                    "<|begin_of_text|>",
                ]
            }
        )
        tok.bos_token = "<|begin_of_text|>"
        tok.eos_token = "<|eot_id|>"
        tok.chat_template = LLAMA3_TEMPLATE
    elif kind != "local":
        raise ValueError(f"unknown template kind {kind!r}; expected local, qwen or llama3")
    return tok
