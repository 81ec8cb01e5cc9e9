"""What screens may ask of the console app: a narrow protocol, so no screen imports
``ConsoleApp`` (and the app can import every screen without an import circle).
Enforced by an import-linter contract."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Protocol, TypeVar

from hermes_console.runtime.api import RuntimeAPI
from hermes_console.runtime.state import ConsoleState

T = TypeVar("T")


class ConsoleHost(Protocol):
    """The app as its screens see it: the state to draw, the clock, and commands to send."""

    state: ConsoleState
    runtime: RuntimeAPI
    stopping: bool
    switch_peak: int  # largest in-flight count seen during the current phase switch

    def now(self) -> float: ...

    def stop_note(self) -> str: ...

    def ui_note(self) -> str: ...

    def panels_per_redraw(self) -> int | None: ...

    def redraw_soon(self) -> None: ...

    def redraw_later(self) -> None: ...

    def send(
        self,
        label: str,
        call: Callable[[], Future[T]],
        *,
        success: str | Callable[[T], str] | None = None,
        on_result: Callable[[T], None] | None = None,
        on_error: Callable[[BaseException], None] | None = None,
        quiet_replay: bool = False,
    ) -> bool: ...

    def kill_sandbox(self, task_id: str) -> None: ...

    def extend_sandbox(self, task_id: str) -> None: ...

    def extend_command(self, task_id: str) -> None: ...
