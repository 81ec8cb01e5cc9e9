"""``SimServer``: the simulator on its own thread + event loop, or inside yours.

with SimServer(SimConfig(solve_rate=0.7)) as sim:      # thread mode
    client = AsyncOpenAI(base_url=f"{sim.base_url}/v1", api_key="x")

sim = SimServer(); url = await sim.start_async(); ...; await sim.stop_async()  # in-loop mode
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from aiohttp import web

from hermes_console.sim.app import SimApp
from hermes_console.sim.config import SimConfig
from hermes_console.sim.tokens import SimTokenizer

_SHUTDOWN_TIMEOUT_S = 3.0


class SimServer:
    def __init__(
        self, config: SimConfig | None = None, *, tokenizer: SimTokenizer | None = None, **overrides: Any
    ) -> None:
        base = config or SimConfig()
        self.config = base.model_copy(update=overrides) if overrides else base
        if overrides:
            self.config = SimConfig.model_validate(self.config.model_dump())  # re-validate the overrides
        self.app = SimApp(self.config, tokenizer)
        self._runner: web.ServerRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._port: int | None = None

    # ------------------------------------------------------------------ info

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("SimServer is not running; call start() first")
        return self._port

    @property
    def base_url(self) -> str:
        """Root URL, e.g. http://127.0.0.1:PORT (OpenAI clients want f"{base_url}/v1")."""
        return f"http://{self.config.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._runner is not None

    def set_faults(self, replace: bool = False, **rates: float) -> dict[str, float]:
        """Change fault rates at run time (thread-safe); returns the new rates."""
        return self.app.faults.set(rates, replace=replace)

    def stats(self) -> dict[str, Any]:
        return self.app.snapshot()

    # ------------------------------------------------------------------ in an existing loop

    async def start_async(self) -> str:
        if self._runner is not None:
            raise RuntimeError("SimServer already started")
        self._loop = asyncio.get_running_loop()
        runner = web.ServerRunner(self.app.build(), handle_signals=False, shutdown_timeout=_SHUTDOWN_TIMEOUT_S)
        await runner.setup()
        site = web.TCPSite(runner, self.config.host, self.config.port, backlog=2048, reuse_address=True)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        server: Any = site._server  # the only way aiohttp exposes the bound port
        self._port = int(server.sockets[0].getsockname()[1])
        self._runner = runner
        return self.base_url

    async def stop_async(self) -> None:
        runner, self._runner = self._runner, None
        if runner is None:
            return
        self._port = None
        self.app.begin_stop()
        await runner.cleanup()

    async def __aenter__(self) -> SimServer:
        await self.start_async()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop_async()

    # ------------------------------------------------------------------ own thread

    def start(self, timeout: float = 30.0) -> str:
        """Serve from a new daemon thread with its own loop; returns the base URL once bound."""
        if self._thread is not None:
            raise RuntimeError("SimServer already started")
        ready = threading.Event()
        failure: list[BaseException] = []
        loop = _new_loop(self.config.use_uvloop)
        self._loop = loop

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.start_async())
            except BaseException as exc:  # noqa: BLE001 - report bind errors etc. to the caller
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(self.stop_async())
                _cancel_leftovers(loop)
                loop.close()

        self._thread = threading.Thread(target=run, name=f"hermes-sim:{self.config.port or 'auto'}", daemon=True)
        self._thread.start()
        if not ready.wait(timeout):
            raise TimeoutError("simulator did not start in time")
        if failure:
            self._thread.join()
            self._thread = None
            raise failure[0]
        return self.base_url

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving; cancels hanging requests; joins the thread. Idempotent."""
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            return
        if loop.is_running():
            # Wake hangs first (from the loop thread), then stop the loop; run() cleans up.
            loop.call_soon_threadsafe(self.app.begin_stop)
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)
        if thread.is_alive():
            raise TimeoutError("simulator thread did not stop in time")
        self._thread = None

    def __enter__(self) -> SimServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _new_loop(use_uvloop: bool) -> asyncio.AbstractEventLoop:
    if use_uvloop:
        try:
            import uvloop

            return uvloop.new_event_loop()
        except ImportError:
            pass
    return asyncio.new_event_loop()


def _cancel_leftovers(loop: asyncio.AbstractEventLoop) -> None:
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for t in tasks:
        t.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())
