"""Serve mode: what the atropos trainer API says (step, queue, weight, back-pressure)
and where the time goes (waiting on the trainer vs on inference)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from hermes_console.runtime.events import TrainerStatus
from hermes_console.runtime.state import ConsoleState
from hermes_console.ui.widgets.trend_line import TrendLine

STATE_STYLE = {
    "running": "bold green",
    "finished": "bold cyan",
    "backpressure": "bold yellow",
    "waiting": "yellow",
    "registered": "green",
    "unreachable": "bold red",
    "error": "bold red",
}
MIN_WAIT_S = 1.0  # below this neither side has held anything up yet


def bottleneck(t: TrainerStatus) -> Text:
    """Which side the host waits on more: the trainer (it consumes slower than we produce)
    or inference (the trainer would take more, but every rollout slot is busy)."""
    total = t.wait_trainer_s + t.wait_inference_s
    if total < MIN_WAIT_S:
        return Text("bottleneck: – (no waiting yet)", style="dim")
    trainer_share = t.wait_trainer_s / total
    side = "trainer" if trainer_share >= 0.5 else "inference"
    share = max(trainer_share, 1.0 - trainer_share)
    text = Text("bottleneck: ")
    text.append(side, style="bold magenta" if side == "trainer" else "bold cyan")
    text.append(f" ({share:.0%} of the waiting)", style="dim")
    return text


def render_trainer(t: TrainerStatus | None) -> Text:
    """Plain text of the panel (also used by tests)."""
    if t is None:
        return Text("no trainer (process/evaluate mode)", style="dim")
    text = Text()
    text.append(t.state, style=STATE_STYLE.get(t.state, "bold"))
    if t.env_id is not None:
        text.append(f"  env {t.env_id}", style="dim")
    text.append(f"  step {t.current_step}/{t.total_steps or '?'}  batch {t.batch_size}  group {t.group_size}")
    text.append(f"\nqueue {t.queue_size} (own {t.self_queue_size}, all envs {t.total_queue_size})")
    if t.backpressure:
        text.append("  back-pressure", style="bold yellow")
    text.append(f"\nweight {t.env_weight:.2f}  unallocated {t.unallocated_fraction:.0%}")
    text.append(f"\nconfirmed {t.groups_sent}  this step {t.groups_sent_this_step}  per step {t.groups_per_step:g}")
    if t.send_unknown or t.send_errors:
        failed = t.send_errors - t.send_unknown
        text.append(f"  unknown {t.send_unknown}", style="bold yellow" if t.send_unknown else "")
        text.append(f"  failed {failed}", style="bold red" if failed else "")
    if t.send_retries or t.reregistrations:
        text.append(f"\nre-posted (never reached it) {t.send_retries}  re-registered {t.reregistrations}", style="dim")
    text.append(f"\nwaiting on trainer {t.wait_trainer_s:.1f}s  on inference {t.wait_inference_s:.1f}s")
    text.append("\n")
    text.append_text(bottleneck(t))
    if t.send_errors:
        text.append(f"\nsend errors {t.send_errors}: ", style="bold red")
        text.append(t.last_send_error or "", style="red")
    if t.warning:
        text.append(f"\n! {t.warning}", style="bold yellow")
    if t.detail and t.state in ("waiting", "unreachable", "error", "finished"):
        text.append(f"\n{t.detail}", style="dim")
    return text


class TrainerPanel(Vertical):
    can_focus = True

    def compose(self) -> ComposeResult:
        yield Static(render_trainer(None), id="trainer-text")
        yield TrendLine([], id="trainer-queue", summary_function=max)

    def on_mount(self) -> None:
        self.border_title = "Trainer"
        self.border_subtitle = "queue per step"
        self._seen: float | None = None

    @staticmethod
    def wanted(state: ConsoleState) -> bool:
        return state.run.mode == "serve" or state.trainer is not None

    def update_from(self, state: ConsoleState) -> None:
        t = state.trainer
        key = t.ts if t is not None else None
        if key == self._seen:
            return
        self._seen = key
        self.query_one("#trainer-text", Static).update(render_trainer(t))
        self.query_one("#trainer-queue", TrendLine).data = [float(p.queue_size) for p in state.trainer_history]
        self.border_title = f"Trainer ({t.state})" if t is not None else "Trainer"
