"""A tiny OpenAI-shaped server on loopback that answers badly on purpose (issue 19, point 5):
``garbage`` (200, not JSON), ``nochoices`` (200, JSON without choices), ``slowloris`` (200,
then one byte every ``drip_s``, never finishing), ``huge`` (200, a valid 5 MB completion).

Imported as ``bad_server`` (tests/ has no packages; the name is unique in tests/)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading

from aiohttp import web

HUGE_BYTES = 5 * 1024 * 1024


def _completion(content: str) -> dict:
    return {
        "id": "bad-1",
        "object": "chat.completion",
        "created": 0,
        "model": "hermes-sim",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


class BadServer:
    def __init__(self, mode: str, drip_s: float = 0.3) -> None:
        self.mode = mode
        self.drip_s = drip_s
        self.requests = 0
        self._loop = asyncio.new_event_loop()
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._runner: web.AppRunner | None = None
        self._stopping: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="hermes-sim-bad-server", daemon=True)
        self._ready = threading.Event()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._stopping = asyncio.Event()
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app, shutdown_timeout=1.0)
        self._loop.run_until_complete(self._runner.setup())
        self._loop.run_until_complete(web.SockSite(self._runner, self._sock).start())
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._runner.cleanup())
        self._loop.close()

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "hermes-sim", "object": "model"}]})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        self.requests += 1
        if self.mode == "garbage":
            return web.Response(
                status=200, text="<html>upstream gateway says hello</html>", content_type="application/json"
            )
        if self.mode == "nochoices":
            return web.json_response({"id": "x", "object": "chat.completion", "model": "hermes-sim"})
        if self.mode == "huge":
            return web.Response(
                status=200, body=json.dumps(_completion("x" * HUGE_BYTES)).encode(), content_type="application/json"
            )
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        assert self._stopping is not None
        while not self._stopping.is_set():  # slowloris: never a whole reply
            try:
                await resp.write(b" ")
            except (ConnectionError, RuntimeError):
                break
            try:
                await asyncio.wait_for(self._stopping.wait(), self.drip_s)
            except TimeoutError:
                pass
        return resp

    def start(self) -> BadServer:
        self._thread.start()
        assert self._ready.wait(30), "bad server did not start"
        return self

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        assert self._stopping is not None
        self._loop.call_soon_threadsafe(self._stopping.set)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(15)
