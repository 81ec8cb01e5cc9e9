"""A fault-injecting HTTP proxy in front of run-api, written for the delivery tests.

Modes (switchable while running):
- ``pass``: forward everything;
- ``store_then_504``: forward ``POST /scored_data*`` (run-api stores it), answer 504 —
  what a load balancer does when run-api is slow to answer;
- ``reject_400``: answer 400 to every ``POST /scored_data*`` without forwarding;
- ``down``: close the listening socket (connections refused) and cut kept-alive
  connections; a post already connected is still forwarded — ``up()`` listens again
  on the same port.
The upstream can be switched (``retarget``) to stand in for a run-api restart behind a
stable address. It counts what it forwarded, so tests can compare with what the trainer got.
"""

from __future__ import annotations

import asyncio
import threading

import aiohttp
from aiohttp import web


class FaultProxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.port = 0  # bound by the first start (port 0: no race with other workers), kept across down/up
        self.url = ""
        self.mode = "pass"
        self.posts_forwarded = 0
        self.posts_answered_504 = 0
        self.last_upstream: tuple = ()
        self._down = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="hermes-sim-fault-proxy", daemon=True)
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self._session: aiohttp.ClientSession | None = None

    # ------------------------------------------------------------------ lifecycle (test thread)

    def start(self) -> FaultProxy:
        self._thread.start()
        self._call(self._start())
        return self

    def stop(self) -> None:
        self._call(self._stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def down(self) -> None:
        self._down = True  # kept-alive connections are cut too: the whole API is away
        self._call(self._site_stop())

    def up(self) -> None:
        self._down = False
        self._call(self._site_start())

    def retarget(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")

    def _call(self, coro) -> None:  # type: ignore[no-untyped-def]
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(30)

    # ------------------------------------------------------------------ server (proxy thread)

    async def _start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        await self._site_start()

    async def _site_start(self) -> None:
        assert self._runner is not None
        self._site = web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True)
        await self._site.start()
        if not self.port:
            self.port = int(self._runner.addresses[0][1])
            self.url = f"http://127.0.0.1:{self.port}"

    async def _site_stop(self) -> None:
        if self._site is not None:
            await self._site.stop()
            self._site = None

    async def _stop(self) -> None:
        await self._site_stop()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        is_post = request.method == "POST" and request.path.startswith("/scored_data")
        # Down: kept-alive connections (the host's polling session) are cut, the whole API is
        # away. A post comes on a fresh connection, so one seen here was connected before the
        # outage: it is forwarded, never cut half-way (the delivery tests must not depend on
        # whether a post happened to be in flight at the moment of down()).
        if self._down and not is_post and request.transport is not None:
            request.transport.close()
            raise ConnectionResetError("the fault proxy is down")
        if is_post and self.mode == "reject_400":
            return web.json_response({"detail": "rejected by the fault proxy"}, status=400)
        body = await request.read()
        # aiohttp has already decompressed a gzip body: forward it plain.
        headers = {k: v for k, v in request.headers.items() if k.lower() == "content-type"}
        assert self._session is not None
        async with self._session.request(
            request.method, f"{self.upstream}{request.path_qs}", data=body, headers=headers
        ) as upstream:
            payload = await upstream.read()
            status = upstream.status
            content_type = upstream.headers.get("Content-Type", "application/json")
        if is_post:
            self.last_upstream = (status, payload[:300])
            self.posts_forwarded += 1
            if self.mode == "store_then_504":
                self.posts_answered_504 += 1
                return web.Response(status=504, text="upstream timed out")
        return web.Response(status=status, body=payload, headers={"Content-Type": content_type})
