"""The aiohttp application: routing, validation, faults, latency, concurrency.

Handlers stay thin: parse + validate (400 on bad input), decide whole-request
faults, wait for a concurrency slot, let the :class:`Engine` build the body,
sleep the modelled latency, answer.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ValidationError

from hermes_console.sim.config import SimConfig, validate_fault_rates
from hermes_console.sim.engine import Engine, RequestKey, Result
from hermes_console.sim.faults import FaultInjector
from hermes_console.sim.rng import Occurrences, digest, lognormal_ms, unit
from hermes_console.sim.stats import SimStats
from hermes_console.sim.tokens import SimTokenizer
from hermes_console.sim.wire import (
    ChatCompletionRequest,
    CompletionRequest,
    SGLangGenerateRequest,
    VLLMGenerateRequest,
    error_body,
    is_sglang_body,
    validation_error_body,
)

log = logging.getLogger("hermes_console.sim")

_dumps: Callable[[Any], str] = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


_MAX_BODY = 256 * 1024 * 1024


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=_dumps(body).encode(), status=status, content_type="application/json")


def _bad(message: str, param: str | None = None, code: str | None = None) -> web.Response:
    return _json(error_body(message, param=param, code=code), status=400)


class SimApp:
    def __init__(self, config: SimConfig, tokenizer: SimTokenizer | None = None) -> None:
        self.config = config
        self.tok = tokenizer or SimTokenizer(config.tokenizer_path)
        self.stats = SimStats()
        self.faults = FaultInjector(config.seed, config.faults)
        self.engine = Engine(config, self.tok, self.faults, self.stats)
        self._occ = Occurrences()
        self._health_checks = 0
        # Loop-bound objects are made in build(), on the loop that serves.
        self._sem: asyncio.Semaphore | None = None
        self._stopping: asyncio.Event | None = None

    def build(self) -> web.Server:
        """A low-level aiohttp server: a dict lookup instead of router + middleware
        (it is on every request's path, and the bench wants thousands per second)."""
        self._sem = asyncio.Semaphore(self.config.max_concurrency)
        self._stopping = asyncio.Event()
        self._routes: dict[str, dict[str, Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]]] = {
            "/v1/chat/completions": {"POST": self.chat_completions},
            "/v1/completions": {"POST": self.completions},
            "/v1/models": {"GET": self.models},
            "/generate": {"POST": self.generate},
            "/health": {"GET": self.health},
            "/stats": {"GET": self.stats_handler},
            "/admin/faults": {"GET": self.admin_faults, "POST": self.admin_faults, "DELETE": self.admin_faults},
        }
        return web.Server(
            self._dispatch, request_factory=self._make_request, handler_cancellation=True, access_log=None
        )

    def _make_request(self, message: Any, payload: Any, protocol: Any, writer: Any, task: Any) -> web.BaseRequest:
        # Phase 2 prompts and long tool outputs can exceed aiohttp's 1 MiB default.
        return web.BaseRequest(
            message, payload, protocol, writer, task, asyncio.get_running_loop(), client_max_size=_MAX_BODY
        )

    def begin_stop(self) -> None:
        """Wake every hanging request so shutdown is quick."""
        if self._stopping is not None:
            self._stopping.set()

    async def _dispatch(self, request: web.BaseRequest) -> web.StreamResponse:
        methods = self._routes.get(request.path.rstrip("/") or "/")
        if methods is None:
            return _json(error_body(f"Unknown endpoint {request.method} {request.path}", code="not_found"), 404)
        handler = methods.get(request.method)
        if handler is None:
            return _json(
                error_body(
                    f"Method {request.method} not allowed on {request.path}; use {', '.join(methods)}",
                    code="method_not_allowed",
                ),
                405,
            )
        try:
            return await handler(request)
        except (asyncio.CancelledError, ConnectionResetError):
            raise
        except web.HTTPException as exc:  # e.g. body too large
            return _json(
                error_body(
                    exc.reason,
                    code=str(exc.status),
                    type_="invalid_request_error" if exc.status < 500 else "server_error",
                ),
                status=exc.status,
            )
        except Exception as exc:  # a simulator bug must look like a server error, not kill the server
            log.exception("simulator error on %s", request.path)
            return _json(error_body(f"simulator error: {type(exc).__name__}: {exc}", type_="server_error"), 500)

    # ------------------------------------------------------------------ generation endpoints

    async def chat_completions(self, request: web.BaseRequest) -> web.StreamResponse:
        return await self._generation(request, "chat_completions", ChatCompletionRequest, self.engine.chat)

    async def completions(self, request: web.BaseRequest) -> web.StreamResponse:
        return await self._generation(request, "completions", CompletionRequest, self.engine.completion)

    async def generate(self, request: web.BaseRequest) -> web.StreamResponse:
        body = await self._peek_json(request)
        if isinstance(body, dict) and is_sglang_body(body):
            return await self._generation(
                request, "generate_sglang", SGLangGenerateRequest, self.engine.sglang_generate
            )
        return await self._generation(request, "generate_vllm", VLLMGenerateRequest, self.engine.vllm_generate)

    async def _peek_json(self, request: web.BaseRequest) -> Any:
        raw = await request.read()  # cached by aiohttp; _generation reads it again for free
        try:
            return json.loads(raw)
        except ValueError:
            return None

    async def _generation(
        self,
        request: web.BaseRequest,
        endpoint: str,
        model: type[BaseModel],
        produce: Callable[[Any, dict[str, Any], RequestKey, bool], Result],
    ) -> web.StreamResponse:
        self.stats.request(endpoint)
        raw = await request.read()
        try:
            data = json.loads(raw)
        except ValueError as exc:
            self.stats.bad_request()
            return _bad(f"We could not parse the JSON body of your request: {exc}", code="invalid_json")
        if not isinstance(data, dict):
            self.stats.bad_request()
            return _bad("The request body must be a JSON object.", code="invalid_json")
        try:
            req = model.model_validate(data)
        except ValidationError as exc:
            self.stats.bad_request()
            return _json(validation_error_body(exc), status=400)

        body_hash = digest(raw)
        key = RequestKey(body_hash, self._occ.next(body_hash))
        faults = self.faults
        if faults.hit("drop_connection", key.body, key.occurrence):
            self.stats.fault("drop_connection")
            return self._drop(request)
        if faults.hit("http_500", key.body, key.occurrence):
            self.stats.fault("http_500")
            return _json(
                error_body(
                    "The simulator injected an internal server error (fault http_500).",
                    type_="server_error",
                    code="simulated_fault",
                ),
                status=500,
            )
        hang = faults.hit("hang", key.body, key.occurrence)
        empty = faults.hit("empty_choices", key.body, key.occurrence)

        assert self._sem is not None
        self.stats.add_in_flight(1)
        started = time.perf_counter()
        try:
            if self._sem.locked():
                self.stats.add_queued(1)
                try:
                    await self._sem.acquire()
                finally:
                    self.stats.add_queued(-1)
            else:
                await self._sem.acquire()
            try:
                if hang:
                    self.stats.fault("hang")
                    await self._hang()
                    return self._drop(request)
                if empty:
                    self.stats.fault("empty_choices")
                result = produce(req, data, key, empty)
                await self._sleep_latency(key, result.longest)
            finally:
                self._sem.release()
        finally:
            self.stats.add_in_flight(-1)
        self.stats.finished((time.perf_counter() - started) * 1000.0, result.prompt_tokens, result.completion_tokens)
        return _json(result.body)

    async def _hang(self) -> None:
        # Longer than any sane client timeout, but bounded, and over at stop().
        assert self._stopping is not None
        try:
            await asyncio.wait_for(self._stopping.wait(), timeout=self.config.hang_max_s)
        except TimeoutError:
            pass

    def _drop(self, request: web.BaseRequest) -> web.StreamResponse:
        if request.transport is not None:
            request.transport.abort()  # no response bytes at all: the client sees a dropped connection
        # aiohttp notices the dead transport when writing this and drops it quietly.
        return web.Response(status=204)

    async def _sleep_latency(self, key: RequestKey, tokens: int) -> None:
        lat = self.config.latency
        delay_ms = 0.0
        if lat.mean_ms > 0:
            if lat.mode == "fixed":
                delay_ms = lat.mean_ms
            else:
                u1 = unit(self.config.seed, "lat1", key.body, key.occurrence)
                u2 = unit(self.config.seed, "lat2", key.body, key.occurrence)
                delay_ms = lognormal_ms(lat.mean_ms, lat.sigma, u1, u2)
        if lat.tokens_per_s > 0:
            delay_ms += 1000.0 * tokens / lat.tokens_per_s
        if delay_ms > 0:
            await asyncio.sleep(delay_ms / 1000.0)

    # ------------------------------------------------------------------ the rest

    async def models(self, request: web.BaseRequest) -> web.StreamResponse:
        self.stats.request("models")
        return _json(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.config.model_name,
                        "object": "model",
                        "created": int(self.stats.started_at),
                        "owned_by": "hermes-sim",
                    }
                ],
            }
        )

    async def health(self, request: web.BaseRequest) -> web.StreamResponse:
        self.stats.request("health")
        self._health_checks += 1
        if self.faults.hit("unhealthy", "health", self._health_checks):
            self.stats.fault("unhealthy")
            return _json({"status": "unhealthy", "reason": "fault injected: unhealthy"}, status=503)
        return _json({"status": "ok"})

    async def stats_handler(self, request: web.BaseRequest) -> web.StreamResponse:
        self.stats.request("stats")
        return _json(self.snapshot())

    def snapshot(self) -> dict[str, Any]:
        snap = self.stats.snapshot()
        snap["fault_rates"] = self.faults.rates
        snap["max_concurrency"] = self.config.max_concurrency
        snap["model"] = self.config.model_name
        return snap

    async def admin_faults(self, request: web.BaseRequest) -> web.StreamResponse:
        """GET: current rates. POST {kind: rate, ...} (or {"faults": {...}, "replace": bool}): merge. DELETE: clear."""
        self.stats.request("admin")
        if request.method == "DELETE":
            return _json({"faults": self.faults.set({}, replace=True)})
        if request.method == "POST":
            try:
                data = json.loads(await request.read() or b"{}")
            except ValueError as exc:
                return _bad(f"We could not parse the JSON body of your request: {exc}", code="invalid_json")
            if not isinstance(data, dict):
                return _bad("Expected a JSON object mapping fault kind to rate.", param="faults")
            replace = bool(data.get("replace", False))
            rates = data.get("faults", data if "faults" not in data else None)
            if not isinstance(rates, dict):
                return _bad("'faults' must be an object mapping fault kind to rate.", param="faults")
            rates = {k: v for k, v in rates.items() if k != "replace"}
            try:
                validate_fault_rates(rates)
            except ValueError as exc:
                return _bad(str(exc), param="faults")
            return _json({"faults": self.faults.set(rates, replace=replace)})
        return _json({"faults": self.faults.rates})
