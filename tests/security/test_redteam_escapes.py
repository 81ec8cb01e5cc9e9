"""Red team (#18, finding 7): escape sequences in model / sandbox text reach the operator's
terminal as visible text, never as terminal commands (OSC 52 clipboard write, title
change, screen clear). Pilot over the UI's fake runtime; the oracle is what the
widgets hand to the terminal (their rendered strips) and the app's screenshot."""

from __future__ import annotations

import dataclasses

from textual.widgets import RichLog

from environments import events as ev
from hermes_console.runtime.payloads import CommandRecord, ProcessInfo
from hermes_console.ui.format import head, shown, visible
from hermes_console.ui.screens.rollout import RolloutScreen
from hermes_console.ui.widgets.turns_stream import TurnsStream
from hermes_console_dev.fake_runtime import FakeResults, FakeRuntime, sample_details
from tests.ui.helpers import make_app, scenario, settle

OSC52 = "\x1b]52;c;cm0gLXJmIH4K\x07"  # "set the clipboard to `rm -rf ~`"
TITLE = "\x1b]0;pwned\x07"
CSI = "\x1b[2J\x1b[31mRED\x1b[0m"
C1_CSI = "\x9b31m"
PAYLOAD = f"hello {OSC52}{TITLE}{CSI}{C1_CSI} bye"


def _raw_controls(text: str) -> list:
    return [c for c in text if (ord(c) < 32 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F]


def test_visible_makes_every_control_character_inert() -> None:
    out = visible(PAYLOAD + "\r\x08\u202e")
    assert _raw_controls(out) == [] and "\u202e" not in out
    assert "␛]52;c;cm0gLXJmIH4K␇" in out and "␛[2J" in out and "\\x9b31m" in out
    assert visible("line1\nline2\tcol") == "line1\nline2\tcol"  # layout characters kept
    assert _raw_controls(head(PAYLOAD, 200)) == [] and _raw_controls(shown(PAYLOAD).plain) == []


def _inject(events: list) -> list:
    """The scenario with model-supplied text replaced by the payload everywhere it appears."""
    out = []
    for e in events:
        if isinstance(e, ev.TurnFinished):
            e = dataclasses.replace(e, content=PAYLOAD, reasoning=PAYLOAD if e.reasoning else None)
        elif isinstance(e, ev.ToolCallStarted):
            e = dataclasses.replace(e, args_head=PAYLOAD)
        elif isinstance(e, ev.ToolCallFinished):
            e = dataclasses.replace(e, result_head=PAYLOAD)
        elif isinstance(e, ev.RolloutStarted):
            e = dataclasses.replace(e, item_summary=PAYLOAD)
        out.append(e)
    return out


def _strips(log: RichLog) -> str:
    return "\n".join(strip.text for strip in log.lines)


async def test_escape_sequences_in_a_turn_are_shown_escaped() -> None:
    app = make_app(FakeRuntime(_inject(scenario("small"))))
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        stream = _strips(app.screen.query_one(TurnsStream))
        assert "␛]52;c;" in stream  # the model's text is there, visibly
        assert _raw_controls(stream) == []
        rollout = next(r for r in app.state.rollouts.values() if r.turns)
        app.push_screen(RolloutScreen(rollout.rollout_id))
        await settle(pilot)
        transcript = _strips(app.screen.query_one("#transcript", RichLog))
        header = str(app.screen.query_one("#rollout-header").render())
        assert "␛]52;c;" in transcript and "␛[2J" in transcript
        assert _raw_controls(transcript) == [] and _raw_controls(header) == []
        # what the whole screen sends to the terminal carries no raw ESC from the payload
        screenshot = app.export_screenshot()
        assert "]52;c;cm0gLXJmIH4K" in screenshot or "52;c;cm0gLXJmIH4K" in screenshot
        assert "\x1b]52" not in screenshot and "\x1b]0;pwned" not in screenshot


async def test_sandbox_drilldown_shows_hostile_text_escaped_and_the_limits() -> None:
    from hermes_console.ui.screens.sandbox import SandboxScreen

    details = sample_details(
        cwd=f"/workspace/{OSC52}",
        process_tree=[ProcessInfo(pid=7, ppid=1, command=f"sleep 1 {TITLE}", state="S", elapsed_s=1.0)],
        recent_commands=[
            CommandRecord(command=f"printf '{CSI}'", started_at=0.0, duration_s=0.01, exit_code=0, output_head=PAYLOAD)
        ],
        lifetime_s=300.0,
        limits={
            "pids": "256 (cgroup)",
            "memory": "5120 MB (cgroup)",
            "cpu_time": "3600 s per process (rlimit)",
            "file_size": "4096 MB per file (rlimit)",
            "enforced_by": "cgroup",
        },
    )
    runtime = FakeRuntime(scenario("small"), results=FakeResults(sandbox_details=details))
    app = make_app(runtime)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        task_id = next(iter(app.state.live_sandboxes())).task_id
        app.push_screen(SandboxScreen(task_id))
        await settle(pilot)
        header = str(app.screen.query_one("#sandbox-header").render())
        commands = _strips(app.screen.query_one("#recent-commands", RichLog))
        assert "limits pids 256 (cgroup)" in header and "memory 5120 MB (cgroup)" in header
        assert "␛]52;c;" in header and "␛[2J" in commands
        assert _raw_controls(header) == [] and _raw_controls(commands) == []
        assert "\x1b]0;pwned" not in app.export_screenshot()
