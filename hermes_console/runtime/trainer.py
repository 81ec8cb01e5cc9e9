"""Serve mode, basic: the link to the atropos trainer API.

Registers the env (showing TrainerStatus("waiting") until a trainer has started),
reads ``/info``, then polls ``/status-env``: back-pressure closes the driver's
trainer gate when the trainer's queue holds ``max_batches_offpolicy`` batches,
and the run finishes once the trainer reaches ``total_steps``. Groups are sent by
``handle_send_to_api(do_send_to_api=True)`` in the driver.
Not yet: periodic evals (steps_per_eval), checkpoints, min_batch_allocation.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Dict, Optional

from environments import events
from hermes_console.runtime import events as rev
from hermes_console.runtime.errors import first_line

if TYPE_CHECKING:
    from hermes_console.runtime.driver import Driver

POLL_S = 0.5


class TrainerLink:
    def __init__(self, driver: "Driver") -> None:
        self.driver = driver
        self.env = driver.env
        self.finished = False
        self._last: Optional[Dict[str, Any]] = None

    def _status(self, state: str, **kw: Any) -> None:
        key = {"state": state, **kw}
        if key != self._last:
            self._last = key
            events.emit(rev.TrainerStatus(state=state, **kw))

    async def _register(self) -> None:
        env = self.env
        while True:
            try:
                data = await env._register_env()
            except Exception as exc:  # unreachable trainer API: keep trying, visibly
                self._status("unreachable")
                events.emit(rev.LogRecord(level="WARNING", logger="trainer",
                                          message=f"{env.config.rollout_server_url}: {first_line(exc)}"))
                await asyncio.sleep(1.0)
                continue
            if data.get("status") != "success":
                self._status("waiting")
                await asyncio.sleep(1.0)
                continue
            env.env_id = data["env_id"]
            env.wandb_prepend = data.get("wandb_name")
            env.curr_step = data.get("starting_step", 0)
            env.checkpoint_dir = data.get("checkpoint_dir", "")
            env.checkpoint_interval = data.get("checkpoint_interval", -1)
            if env.config.total_steps == -1:
                env.config.total_steps = data.get("num_steps", -1)
            self._status("registered", current_step=env.curr_step)
            return

    def _backpressure(self, status: Dict[str, Any]) -> bool:
        cfg = self.env.config
        batch = cfg.batch_size
        if batch is None or batch <= 0:
            return True
        return cfg.max_batches_offpolicy > 0 and status["queue_size"] * cfg.group_size >= cfg.max_batches_offpolicy * batch

    async def run(self) -> None:
        env = self.env
        self.driver._trainer_open = False
        await self._register()
        await env.get_server_info()
        while True:
            try:
                await env.get_status()
            except Exception as exc:
                self._status("unreachable")
                events.emit(rev.LogRecord(level="WARNING", logger="trainer", message=f"status-env: {first_line(exc)}"))
                await asyncio.sleep(1.0)
                continue
            st = env.status_dict
            env.curr_step = st.get("current_step", env.curr_step)
            self._status("running", current_step=int(st.get("current_step", 0)), queue_size=int(st.get("queue_size", 0)),
                         self_queue_size=int(st.get("self_queue_size", 0)))
            total = env.config.total_steps
            if total > 0 and st.get("current_step", 0) >= total:
                self.finished = True
                self._status("finished", current_step=int(st.get("current_step", 0)))
                self.driver._trainer_open = False
                self.driver._poke()
                return
            self.driver._trainer_open = not self._backpressure(st)
            self.driver._poke()
            await asyncio.sleep(POLL_S)
