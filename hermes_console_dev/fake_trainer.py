"""A stand-in RL trainer for atropos's trainer API (``run-api``).

It does what a trainer does on the wire and nothing else: ``POST /register``
(batch size, step count), then ``GET /batch`` until it has taken ``--steps``
batches. The first ``/batch`` call is what lets envs register. Prints one JSON
line per batch and a summary line; exits 0 when every batch arrived, 1 on timeout.

    python -m hermes_console_dev.fake_trainer --api http://127.0.0.1:8000 --steps 3 --batch-size 8
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hermes_console.runtime.trainer_api import TrainerAPIError, TrainerClient, TrainerRegistration


@dataclass
class PullPause:
    """Holds the trainer between ``/batch`` calls, as a long optimizer step does: a test sets
    ``wanted`` and waits for ``holding``; the step count then stays put until ``wanted`` is cleared."""

    wanted: threading.Event = field(default_factory=threading.Event)
    holding: threading.Event = field(default_factory=threading.Event)


@dataclass
class TrainerRun:
    batches: list[list[dict[str, Any]]] = field(default_factory=list)
    seconds: float = 0.0
    status: dict[str, Any] = field(default_factory=dict)

    @property
    def sequences(self) -> int:
        return sum(len(g.get("tokens") or []) for b in self.batches for g in b)

    def env_ids(self) -> list[Any]:
        return sorted({g.get("env_id") for b in self.batches for g in b}, key=repr)


async def run_trainer(
    api: str,
    steps: int,
    batch_size: int,
    *,
    deadline_s: float = 120.0,
    poll_s: float = 0.2,
    reset: bool = True,
    max_token_len: int = 100_000,
    on_batch: Callable[[int, list[dict[str, Any]]], None] | None = None,
    pause: PullPause | None = None,
    wandb_project: str = "local",
    wandb_group: str = "local",
) -> TrainerRun:
    """Register, then pull ``steps`` batches (or give up at ``deadline_s``)."""
    out = TrainerRun()
    t0 = time.monotonic()
    async with TrainerClient(api) as client:
        if reset:
            await client.reset()  # run-api keeps state in memory between trainers
        await client.register_trainer(
            TrainerRegistration(
                batch_size=batch_size,
                num_steps=steps,
                max_token_len=max_token_len,
                wandb_project=wandb_project,
                wandb_group=wandb_group,
            )
        )
        while len(out.batches) < steps and time.monotonic() - t0 < deadline_s:
            if pause is not None:
                if pause.wanted.is_set():
                    pause.holding.set()
                    await asyncio.sleep(poll_s)
                    continue
                pause.holding.clear()
            try:
                batch = await client.batch()
            except TrainerAPIError:
                batch = None  # a blip: keep polling until the deadline
            if batch:
                out.batches.append(batch)
                if on_batch is not None:
                    on_batch(len(out.batches), batch)
            else:
                await asyncio.sleep(poll_s)
        try:
            out.status = (await client.status()).model_dump()
        except TrainerAPIError:
            pass
    out.seconds = round(time.monotonic() - t0, 2)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hermes_console_dev.fake_trainer", description=__doc__.split("\n\n")[0])
    ap.add_argument("--api", default="http://127.0.0.1:8000", help="run-api base URL")
    ap.add_argument("--steps", type=int, default=3, help="batches to take (also registered as num_steps)")
    ap.add_argument("--batch-size", type=int, default=8, help="sequences per batch (group_size must not exceed it)")
    ap.add_argument("--deadline-s", type=float, default=300.0, help="give up after this long (exit 1)")
    ap.add_argument("--no-reset", action="store_true", help="do not call /reset_data first")
    a = ap.parse_args(argv)
    if a.steps < 1 or a.batch_size < 1:
        ap.error("--steps and --batch-size must be at least 1")

    def show(n: int, batch: list[dict[str, Any]]) -> None:
        print(
            json.dumps(
                {
                    "batch": n,
                    "groups": len(batch),
                    "env_ids": sorted({g.get("env_id") for g in batch}, key=repr),
                    "scores": [g.get("scores") for g in batch],
                }
            ),
            flush=True,
        )

    try:
        run = asyncio.run(
            run_trainer(a.api, a.steps, a.batch_size, deadline_s=a.deadline_s, reset=not a.no_reset, on_batch=show)
        )
    except TrainerAPIError as exc:
        print(f"fake_trainer: {exc}", file=sys.stderr)
        return 1
    print(
        json.dumps(
            {
                "batches": len(run.batches),
                "sequences": run.sequences,
                "env_ids": run.env_ids(),
                "status": run.status,
                "seconds": run.seconds,
            }
        ),
        flush=True,
    )
    return 0 if len(run.batches) >= a.steps else 1


if __name__ == "__main__":
    sys.exit(main())
