"""Request shapes (pydantic) and OpenAI-style errors.

Bad input becomes a 400 ``{"error": {"message", "type": "invalid_request_error",
"param", "code"}}`` naming the field; it never reaches the policy.
Unknown extra fields are accepted (clients send vendor extras such as
``reasoning`` or ``top_k``), as real servers do.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator


class _Loose(BaseModel):
    model_config = ConfigDict(extra="allow")


class FunctionDef(_Loose):
    name: str = Field(min_length=1, max_length=128)
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ToolDef(_Loose):
    type: Literal["function"] = "function"
    function: FunctionDef


class ToolCallFunction(_Loose):
    name: str
    arguments: str | dict[str, Any] = "{}"


class ToolCallIn(_Loose):
    id: str | None = None
    type: str = "function"
    function: ToolCallFunction


class ChatMessage(_Loose):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[Any] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None


class _Sampling(_Loose):
    model: str = Field(min_length=1)
    n: int = Field(1, ge=1, le=128)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, ge=0.0, le=1.0)
    max_tokens: int | None = Field(None, ge=1)
    stream: bool | None = False
    seed: int | None = None

    @field_validator("stream")
    @classmethod
    def _no_stream(cls, v: bool | None) -> bool | None:
        if v:
            raise ValueError("streaming is not supported by the simulator; set stream=false")
        return v


class ChatCompletionRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[ToolDef] | None = None
    tool_choice: str | dict[str, Any] | None = None
    max_completion_tokens: int | None = Field(None, ge=1)


class CompletionRequest(_Sampling):
    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = Field(16, ge=1)  # OpenAI's default for /v1/completions
    logprobs: int | None = Field(None, ge=0, le=20)
    echo: bool = False


class VLLMPrompt(_Loose):
    prompt_token_ids: list[int] = Field(min_length=1)


class VLLMGenerateRequest(_Loose):
    """What atroposlib's VLLMServer posts: ``{"prompt": {"prompt_token_ids": [...]}, "logprobs": 0, ...}``."""

    prompt: VLLMPrompt | str
    n: int = Field(1, ge=1, le=128)
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    logprobs: int | None = Field(None, ge=0, le=20)
    prompt_logprobs: int | None = Field(None, ge=0, le=20)


class SGLangSampling(_Loose):
    max_new_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    n: int = Field(1, ge=1, le=128)


class SGLangGenerateRequest(_Loose):
    """What atroposlib's SGLangServer posts: ``{"input_ids", "sampling_params", "return_logprob"}``."""

    input_ids: list[int] | None = None
    text: str | None = None
    sampling_params: SGLangSampling = Field(default_factory=SGLangSampling)
    return_logprob: bool = False
    return_text_in_logprobs: bool = False


def error_body(
    message: str, param: str | None = None, code: str | None = None, type_: str = "invalid_request_error"
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def validation_error_body(exc: ValidationError) -> dict[str, Any]:
    """First pydantic error as an OpenAI error naming the field (e.g. ``messages.0.role``)."""
    err = exc.errors(include_url=False)[0]
    loc = [str(p) for p in err.get("loc", ()) if not (isinstance(p, str) and ("[" in p or p.startswith("function-")))]
    param = ".".join(loc) or None
    msg = err.get("msg", "invalid value")
    if err.get("type") == "missing":
        msg = f"'{param}' is a required property"
    else:
        msg = f"Invalid value for '{param}': {msg}" if param else msg
    return error_body(msg, param=param, code=str(err.get("type")) if err.get("type") else None)


def is_sglang_body(body: dict[str, Any]) -> bool:
    return "input_ids" in body or "sampling_params" in body or ("text" in body and "prompt" not in body)
