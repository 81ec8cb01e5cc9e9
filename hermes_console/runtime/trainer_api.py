"""The atropos trainer API (``run-api``) as the console speaks it: wire shapes
(pydantic) and a small client with short timeouts and clear errors.

We do not reuse BaseEnv's ``_register_env``/``get_status``/``_send_scored_data_to_api``:
their tenacity retries wait up to 10 s each, and the send swallows 4xx replies
(``return`` with a log line), so a rejected group would look delivered.
"""

from __future__ import annotations

import contextlib
import gzip
import json
from typing import Any, TypeVar, cast

import aiohttp
from pydantic import BaseModel, ConfigDict, Field, ValidationError

ModelT = TypeVar("ModelT", bound=BaseModel)


# What a failed call says about delivery (it matters for POST /scored_data: see TrainerLink.send).
NOT_SENT = "not_sent"  # the connection was refused: the request provably never reached the API
UNKNOWN = "unknown"  # timeout, reset, 5xx, garbled reply: the API may or may not have stored it
REJECTED = "rejected"  # 4xx: the API refused it (run-api validates before it stores)


class TrainerAPIError(RuntimeError):
    """The trainer API could not be reached, or answered something unexpected."""

    def __init__(self, message: str, *, retryable: bool, outcome: str = UNKNOWN) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.outcome = outcome


class _Wire(BaseModel):
    model_config = ConfigDict(extra="allow")  # run-api adds fields between versions


class RegisterEnvRequest(_Wire):
    max_token_length: int
    desired_name: str
    weight: float
    group_size: int
    min_batch_allocation: float | None = None


class RegisterEnvReply(_Wire):
    status: str
    env_id: int | None = None
    wandb_name: str | None = None
    checkpoint_dir: str = ""
    starting_step: int = 0
    checkpoint_interval: int = -1
    num_steps: int = -1


class ServerInfo(_Wire):
    batch_size: int = -1
    max_token_len: int = -1


class EnvStatus(_Wire):
    """``GET /status-env``: queue sizes are in groups of *this* env's group size."""

    current_step: int = 0
    queue_size: int = 0
    self_queue_size: int = 0
    max_group_size: int = 1
    unallocated_fraction: float = 1.0
    env_weight: float = 0.0


class GlobalStatus(_Wire):
    """``GET /status``: the whole queue (groups of every env)."""

    current_step: int = 0
    queue_size: int = 0


class SendReply(_Wire):
    status: str
    groups_processed: int | None = None
    buffered: int | None = None


class TrainerRegistration(_Wire):
    """``POST /register`` (what a trainer sends; used by the stand-in trainer)."""

    wandb_group: str = "local"
    wandb_project: str = "local"
    batch_size: int = Field(..., ge=1)
    max_token_len: int = 100_000
    checkpoint_dir: str = ""
    save_checkpoint_interval: int = -1
    starting_step: int = 0
    num_steps: int = Field(..., ge=1)


def _head(text: str, limit: int = 200) -> str:
    return " ".join(text.split())[:limit]


class TrainerClient:
    """One aiohttp session to ``base_url``; every call bounded by ``timeout_s``."""

    def __init__(self, base_url: str, timeout_s: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> TrainerClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _sess(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=self.timeout)
        return self._session

    async def _call(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        data: bytes | None = None,
        headers: dict[str, str] | None = None,
        fresh: bool = False,
    ) -> Any:
        url = f"{self.base_url}{path}"
        try:
            async with contextlib.AsyncExitStack() as stack:
                # Sends get their own session: groups still in flight when the poll loop ends must still go out.
                session = (
                    await stack.enter_async_context(aiohttp.ClientSession(timeout=self.timeout))
                    if fresh
                    else self._sess()
                )
                resp = await stack.enter_async_context(
                    session.request(method, url, json=json_body, data=data, headers=headers)
                )
                text = await resp.text()
                if resp.status >= 500:
                    raise TrainerAPIError(f"{method} {url}: HTTP {resp.status} {_head(text)}", retryable=True)
                if resp.status >= 400:
                    raise TrainerAPIError(
                        f"{method} {url} was rejected: HTTP {resp.status} {_head(text)}",
                        retryable=False,
                        outcome=REJECTED,
                    )
        except TrainerAPIError:
            raise
        except aiohttp.ClientConnectorError as exc:  # before any byte was sent: safe to retry
            raise TrainerAPIError(
                f"{method} {url}: trainer API unreachable ({type(exc).__name__}: {exc})",
                retryable=True,
                outcome=NOT_SENT,
            ) from None
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise TrainerAPIError(
                f"{method} {url}: trainer API unreachable ({type(exc).__name__}: {str(exc) or 'timed out'})",
                retryable=True,
            ) from None
        try:
            return json.loads(text)
        except ValueError:
            raise TrainerAPIError(f"{method} {url}: expected JSON, got {_head(text)!r}", retryable=False) from None

    @staticmethod
    def _parse(model: type[ModelT], data: Any, what: str) -> ModelT:
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            raise TrainerAPIError(
                f"{what}: unexpected reply {_head(json.dumps(data, default=str))!r} ({exc.error_count()} "
                f"field error(s): {exc.errors()[0]['loc']} {exc.errors()[0]['msg']})",
                retryable=False,
            ) from None

    async def register_env(self, req: RegisterEnvRequest) -> RegisterEnvReply:
        return self._parse(
            RegisterEnvReply,
            await self._call("POST", "/register-env", json_body=req.model_dump()),
            "POST /register-env",
        )

    async def info(self) -> ServerInfo:
        return self._parse(ServerInfo, await self._call("GET", "/info"), "GET /info")

    async def status_env(self, env_id: int) -> EnvStatus:
        # run-api reads the env id from a JSON body on a GET (as atroposlib sends it).
        return self._parse(
            EnvStatus, await self._call("GET", "/status-env", json_body={"env_id": env_id}), "GET /status-env"
        )

    async def wandb_info(self) -> dict[str, Any]:
        """run-api's ``/wandb_info``: the trainer's wandb project and group (None until it registered)."""
        data = await self._call("GET", "/wandb_info")
        return data if isinstance(data, dict) else {}

    async def disconnect_env(self, env_id: int) -> None:
        """Tell run-api this env is gone, so the other envs' weights are right (as atroposlib's cleanup does)."""
        await self._call("POST", "/disconnect-env", json_body={"env_id": env_id})

    async def status(self) -> GlobalStatus:
        return self._parse(GlobalStatus, await self._call("GET", "/status"), "GET /status")

    async def send(self, groups: dict[str, Any] | list[dict[str, Any]]) -> SendReply:
        """POST groups like atroposlib does (gzip when it pays off)."""
        path = "/scored_data_list" if isinstance(groups, list) else "/scored_data"
        body = json.dumps(groups).encode()
        headers = {"Content-Type": "application/json"}
        if len(body) >= 1024:
            packed = gzip.compress(body)
            if len(packed) < len(body):
                body, headers["Content-Encoding"] = packed, "gzip"
        reply = self._parse(
            SendReply, await self._call("POST", path, data=body, headers=headers, fresh=True), f"POST {path}"
        )
        if reply.status not in ("received", "buffered"):
            raise TrainerAPIError(
                f"POST {path}: trainer API answered status {reply.status!r}; expected 'received'", retryable=False
            )
        return reply

    # ---- trainer side (the stand-in trainer)

    async def register_trainer(self, reg: TrainerRegistration) -> dict[str, Any]:
        return cast(dict[str, Any], await self._call("POST", "/register", json_body=reg.model_dump()))

    async def batch(self) -> list[dict[str, Any]] | None:
        data = await self._call("GET", "/batch")
        return data.get("batch") if isinstance(data, dict) else None

    async def reset(self) -> None:
        url = f"{self.base_url}/reset_data"
        try:
            async with self._sess().get(url) as resp:
                await resp.read()
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise TrainerAPIError(f"GET {url}: trainer API unreachable ({exc})", retryable=True) from None
