"""atroposlib's own trainer API (run-api) in-process on loopback, and a trainer that only
registers (so groups stay queued and can be counted)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import urllib.request

import aiohttp


class TrainerAPI:
    """atroposlib's own FastAPI trainer API, served by uvicorn on a free loopback port."""

    def __init__(self) -> None:
        import uvicorn
        from atroposlib.api.server import app

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="error", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, name="test-trainer-api")

    def __enter__(self) -> TrainerAPI:
        self.thread.start()
        end = time.monotonic() + 30
        while not self.server.started and time.monotonic() < end:
            time.sleep(0.05)
        assert self.server.started
        return self

    def __exit__(self, *exc: object) -> None:
        # run-api keeps its state in the module's app (shared by every test in this process):
        # leave it as found, without our registered trainer.
        try:
            urllib.request.urlopen(f"{self.url}/reset_data", timeout=10).read()
        except OSError:
            pass
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


async def _register(url: str, max_token_len: int, batch_size: int, steps: int) -> None:
    async with aiohttp.ClientSession() as session:
        await (await session.get(f"{url}/reset_data")).read()
        reg = {
            "wandb_group": "g",
            "wandb_project": "p",
            "batch_size": batch_size,
            "max_token_len": max_token_len,
            "checkpoint_dir": "",
            "save_checkpoint_interval": -1,
            "starting_step": 0,
            "num_steps": steps,
        }
        await (await session.post(f"{url}/register", json=reg)).read()
        await (await session.get(f"{url}/batch")).read()  # a trainer has started: envs may register


def register_trainer(url: str, max_token_len: int = 100_000, batch_size: int = 8, steps: int = 100) -> None:
    asyncio.run(_register(url, max_token_len, batch_size, steps))


async def _queued(url: str) -> int:
    async with aiohttp.ClientSession() as session:
        return int((await (await session.get(f"{url}/status")).json())["queue_size"])


def queued_groups(url: str) -> int:
    """How many groups the run-api holds (atroposlib's own count)."""
    return asyncio.run(_queued(url))
