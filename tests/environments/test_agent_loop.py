"""HermesAgentLoop, AgentResult, ToolError, reasoning extraction and the tool pool (behaviours 1-19)."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import pytest

import environments.agent_loop as agent_loop
from environments import events
from environments.agent_loop import (
    AgentResult,
    HermesAgentLoop,
    ToolError,
    _extract_reasoning_from_message,
    resize_tool_pool,
)

# ---------------------------------------------------------------- fakes


@dataclass
class MockFunction:
    name: str
    arguments: str


@dataclass
class MockToolCall:
    id: str
    function: MockFunction
    type: str = "function"


@dataclass
class MockMessage:
    content: str | None = None
    tool_calls: list[Any] | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    reasoning_details: list[Any] | None = None


@dataclass
class MockChoice:
    message: MockMessage


@dataclass
class MockChatCompletion:
    choices: list[MockChoice]


def reply(content: str | None = None, calls: list[Any] | None = None, **kw: Any) -> MockChatCompletion:
    return MockChatCompletion([MockChoice(MockMessage(content=content, tool_calls=calls, **kw))])


def call(name: str, args: Any, cid: str = "call_1") -> MockToolCall:
    return MockToolCall(id=cid, function=MockFunction(name, args if isinstance(args, str) else json.dumps(args)))


@dataclass
class MockServer:
    responses: list[Any]
    call_history: list[dict[str, Any]] = field(default_factory=list)

    async def chat_completion(self, **kwargs: Any) -> Any:
        self.call_history.append({k: (list(v) if k == "messages" else v) for k, v in kwargs.items()})
        if self.responses:
            return self.responses.pop(0)
        return reply("Done.")


class FailingServer:
    async def chat_completion(self, **kwargs: Any) -> Any:
        raise ConnectionError("server unreachable")


TERMINAL = {"type": "function", "function": {"name": "terminal", "parameters": {"type": "object"}}}
TOOLS = [
    TERMINAL,
    {"type": "function", "function": {"name": "todo", "parameters": {}}},
    {"type": "function", "function": {"name": "memory", "parameters": {}}},
]
NAMES = {"terminal", "todo", "memory", "session_search"}


@pytest.fixture
def handler():
    """Patch the dispatcher; records (name, args, kwargs, thread ident)."""
    calls: list[Any] = []

    def fake(
        name: str, args: dict[str, Any], task_id: str | None = None, user_task: str | None = None, **kw: Any
    ) -> str:
        calls.append((name, args, task_id, user_task, threading.get_ident()))
        return json.dumps({"output": f"ran {args.get('command')}", "exit_code": 0, "error": None})

    with mock.patch("environments.agent_loop.handle_function_call", side_effect=fake) as patched:
        patched.calls = calls
        yield patched


def user(text: str = "do the thing") -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


# ---------------------------------------------------------------- 1-3


def test_agent_result_defaults():
    r = AgentResult(messages=[])
    assert (r.managed_state, r.turns_used, r.finished_naturally, r.reasoning_per_turn, r.tool_errors, r.error) == (
        None,
        0,
        False,
        [],
        [],
        None,
    )
    assert AgentResult(messages=[]).tool_errors is not r.tool_errors  # no shared mutable default
    e = ToolError(turn=1, tool_name="t", arguments="{}", error="x", tool_result="y")
    assert (e.turn, e.tool_name) == (1, "t")


def test_reasoning_priority():
    both = MockMessage(reasoning_content="rc", reasoning="r", reasoning_details=[{"text": "d"}])
    assert _extract_reasoning_from_message(both) == "rc"
    assert _extract_reasoning_from_message(MockMessage(reasoning_content="", reasoning="r")) == "r"
    assert _extract_reasoning_from_message(MockMessage(reasoning_details=[{"text": ""}, {"text": "d2"}])) == "d2"
    obj = type("D", (), {"text": "objtext"})()
    assert _extract_reasoning_from_message(MockMessage(reasoning_details=[obj])) == "objtext"
    assert _extract_reasoning_from_message(MockMessage(content="<think>no</think>hi")) is None
    assert _extract_reasoning_from_message({"reasoning": "from dict"}) == "from dict"


def test_resize_tool_pool_replaces_and_shuts_down_old_once():
    old = mock.Mock()
    with mock.patch.object(agent_loop, "_tool_executor", old):
        resize_tool_pool(3)
        new = agent_loop._tool_executor
        assert new is not old and new._max_workers == 3
        old.shutdown.assert_called_once_with(wait=False)
    new.shutdown(wait=False)
    with pytest.raises(ValueError, match="positive integer"):
        resize_tool_pool(0)


# ---------------------------------------------------------------- loop cases 4-18


async def test_text_only_reply_finishes_naturally(handler):
    server = MockServer([reply("All done.")])
    result = await HermesAgentLoop(server, TOOLS, NAMES).run(user())
    assert result.finished_naturally and result.turns_used == 1
    assert result.messages[-1] == {"role": "assistant", "content": "All done."}
    assert handler.calls == []


async def test_tool_call_then_text(handler):
    server = MockServer([reply(None, [call("terminal", {"command": "ls"}, "call_abc")]), reply("ok")])
    result = await HermesAgentLoop(server, TOOLS, NAMES).run(user())
    assert [m["role"] for m in result.messages] == ["user", "assistant", "tool", "assistant"]
    assert result.messages[2]["tool_call_id"] == "call_abc"
    assert json.loads(result.messages[2]["content"])["output"] == "ran ls"
    assert result.turns_used == 2 and result.finished_naturally


async def test_max_turns_exhausted(handler):
    server = MockServer([reply(None, [call("terminal", {"command": f"echo {i}"}, f"c{i}")]) for i in range(5)])
    result = await HermesAgentLoop(server, TOOLS, NAMES, max_turns=3).run(user())
    assert result.turns_used == 3 and not result.finished_naturally
    assert result.messages[-1]["role"] == "tool"
    assert len(server.call_history) == 3


async def test_unknown_tool_not_dispatched(handler):
    server = MockServer([reply(None, [call("rm_rf", {"x": 1})])])
    result = await HermesAgentLoop(server, TOOLS, {"terminal", "todo"}).run(user())
    body = json.loads(result.messages[2]["content"])["error"]
    assert "Unknown tool 'rm_rf'" in body and "['terminal', 'todo']" in body
    assert [e.tool_name for e in result.tool_errors] == ["rm_rf"]
    assert handler.calls == []


@pytest.mark.parametrize("raw", ['{"command": "ls"', "[1, 2]", '"just a string"'])
async def test_invalid_or_non_object_json_not_dispatched(handler, raw):
    server = MockServer([reply(None, [call("terminal", raw)])])
    result = await HermesAgentLoop(server, TOOLS, NAMES).run(user())
    body = json.loads(result.messages[2]["content"])["error"]
    assert "Invalid JSON" in body and "retry" in body
    assert result.tool_errors[0].error.startswith("Invalid JSON")
    assert handler.calls == []


async def test_empty_choices_and_raising_server_return_early():
    msgs = user()
    result = await HermesAgentLoop(MockServer([MockChatCompletion([])]), TOOLS, NAMES).run(msgs)
    assert (result.turns_used, result.finished_naturally) == (1, False)
    assert result.messages == user() and "empty" in result.error
    result = await HermesAgentLoop(FailingServer(), TOOLS, NAMES).run(user())
    assert (result.turns_used, result.finished_naturally, result.messages) == (1, False, user())
    assert result.error == "ConnectionError: server unreachable"


async def test_kwargs_forwarded():
    server = MockServer([reply("a")])
    await HermesAgentLoop(server, TOOLS, NAMES, temperature=0.3, max_tokens=77, extra_body={"k": 1}).run(user())
    kw = server.call_history[0]
    assert kw["n"] == 1 and kw["temperature"] == 0.3 and kw["max_tokens"] == 77
    assert kw["extra_body"] == {"k": 1} and kw["tools"] == TOOLS
    server = MockServer([reply("a")])
    await HermesAgentLoop(server, [], set()).run(user())
    assert set(server.call_history[0]) == {"messages", "n", "temperature"}


async def test_managed_state():
    server = MockServer([reply("a")])
    server.get_state = lambda: {"nodes": ["n1"]}
    assert (await HermesAgentLoop(server, [], set()).run(user())).managed_state == {"nodes": ["n1"]}
    assert (await HermesAgentLoop(MockServer([reply("a")]), [], set()).run(user())).managed_state is None


async def test_memory_unavailable_and_todo_in_loop(handler):
    todos = {"todos": [{"id": "1", "content": "write file", "status": "pending"}]}
    server = MockServer(
        [
            reply(None, [call("memory", {"action": "add"}, "m1"), call("session_search", {"q": "x"}, "s1")]),
            reply(None, [call("todo", todos, "t1")]),
            reply(None, [call("todo", {}, "t2")]),
            reply("done"),
        ]
    )
    result = await HermesAgentLoop(server, TOOLS, NAMES).run(user())
    tool_msgs = [m for m in result.messages if m["role"] == "tool"]
    assert "not available" in json.loads(tool_msgs[0]["content"])["error"]
    assert "not available" in json.loads(tool_msgs[1]["content"])["error"]
    read_back = json.loads(tool_msgs[3]["content"])
    assert [t["content"] for t in read_back["todos"]] == ["write file"]  # persisted across turns
    assert handler.calls == []
    # a new loop starts with an empty store
    server2 = MockServer([reply(None, [call("todo", {}, "t3")]), reply("done")])
    fresh = await HermesAgentLoop(server2, TOOLS, NAMES).run(user())
    assert json.loads(fresh.messages[2]["content"])["todos"] == []


async def test_reasoning_attached_per_turn(handler):
    server = MockServer(
        [
            reply(None, [call("terminal", {"command": "ls"})], reasoning_content="think 1"),
            reply("final", reasoning="think 2"),
        ]
    )
    result = await HermesAgentLoop(server, TOOLS, NAMES).run(user())
    assert result.messages[1]["reasoning_content"] == "think 1"
    assert result.messages[3]["reasoning_content"] == "think 2"
    assert result.reasoning_per_turn == ["think 1", "think 2"]


async def test_call_shapes_normalised(handler):
    nested = {"id": "n1", "type": "function", "function": {"name": "terminal", "arguments": '{"command": "a"}'}}
    flat = {"name": "terminal", "arguments": {"command": "b"}}
    server = MockServer([reply(None, [nested, flat, call("terminal", {"command": "c"}, "o1")]), reply("x")])
    result = await HermesAgentLoop(server, TOOLS, NAMES).run(user())
    calls = result.messages[1]["tool_calls"]
    assert calls[0]["id"] == "n1" and calls[2]["id"] == "o1"
    assert calls[1]["id"].startswith("call_") and len(calls[1]["id"]) == 13
    assert all(c["type"] == "function" and isinstance(c["function"]["arguments"], str) for c in calls)
    assert [c[1]["command"] for c in handler.calls] == ["a", "b", "c"]  # sequential, in order
    assert [m["tool_call_id"] for m in result.messages[2:5]] == ["n1", calls[1]["id"], "o1"]


async def test_fallback_parse_hermes_text(handler):
    text = 'Let me look.\n<tool_call>{"name": "terminal", "arguments": {"command": "pwd"}}</tool_call>'
    server = MockServer([reply(text), reply("done")])
    result = await HermesAgentLoop(server, TOOLS, NAMES).run(user())
    assert handler.calls[0][1] == {"command": "pwd"}
    assert result.messages[1]["content"] == "Let me look."
    assert result.messages[2]["role"] == "tool"
    # without tools the text is left alone
    server = MockServer([reply(text)])
    result = await HermesAgentLoop(server, [], set()).run(user())
    assert result.finished_naturally and result.messages[-1]["content"] == text


async def test_fallback_uses_configured_parser(handler):
    text = '[TOOL_CALLS][{"name": "terminal", "arguments": {"command": "whoami"}}]'
    server = MockServer([reply(text), reply("done")])
    await HermesAgentLoop(server, TOOLS, NAMES, tool_call_parser="mistral").run(user())
    assert handler.calls[0][1] == {"command": "whoami"}
    # the hermes parser does not understand mistral text: no dispatch
    handler.calls.clear()
    server = MockServer([reply(text)])
    result = await HermesAgentLoop(server, TOOLS, NAMES).run(user())
    assert handler.calls == [] and result.finished_naturally


async def test_dispatch_exception_and_error_results():
    results = iter(
        [
            RuntimeError("boom"),
            json.dumps({"error": "bad", "exit_code": -1}),
            json.dumps({"output": "partial", "exit_code": 124, "error": "Command timed out after 5 seconds"}),
            json.dumps({"error": "File not found"}),
            json.dumps({"output": "fine", "exit_code": 0, "error": None}),
        ]
    )

    def fake(name, args, **kw):
        value = next(results)
        if isinstance(value, Exception):
            raise value
        return value

    server = MockServer([reply(None, [call("terminal", {"command": str(i)}, f"c{i}") for i in range(5)]), reply("x")])
    with mock.patch("environments.agent_loop.handle_function_call", side_effect=fake):
        result = await HermesAgentLoop(server, TOOLS, NAMES).run(user())
    assert json.loads(result.messages[2]["content"])["error"] == "Tool execution failed: RuntimeError: boom"
    errors = [e.error for e in result.tool_errors]
    assert len(errors) == 4  # the timeout (exit 124) counts too; the success does not
    assert "timed out" in errors[2]


async def test_tools_run_in_executor_with_task_id_and_user_task(handler):
    long_prompt = "  " + "x" * 800
    server = MockServer([reply(None, [call("terminal", {"command": "ls"})]), reply("ok")])
    await HermesAgentLoop(server, TOOLS, NAMES, task_id="task-42").run(user(long_prompt))
    name, args, task_id, user_task, ident = handler.calls[0]
    assert ident != threading.get_ident()
    assert task_id == "task-42" and user_task == "x" * 500


async def test_large_results_persisted_and_read_file_pinned():
    big = "y" * 5000

    def fake(name, args, **kw):
        return json.dumps({"content": big}) if name == "read_file" else json.dumps({"output": big, "exit_code": 0})

    from environments.tools.budget import BudgetConfig

    budget = BudgetConfig(default_result_size=1000, turn_budget=100_000, preview_size=100)
    tools = [TERMINAL, {"type": "function", "function": {"name": "read_file", "parameters": {}}}]
    server = MockServer(
        [reply(None, [call("terminal", {"command": "big"}, "c1"), call("read_file", {"path": "f"}, "c2")]), reply("x")]
    )
    with mock.patch("environments.agent_loop.handle_function_call", side_effect=fake):
        loop = HermesAgentLoop(server, tools, {"terminal", "read_file"}, budget_config=budget)
        try:
            result = await loop.run(user())
        finally:
            from environments.sandboxes import cleanup_vm

            cleanup_vm(loop.task_id)  # persistence wrote into this rollout's sandbox
    term, read = result.messages[2]["content"], result.messages[3]["content"]
    assert term.startswith("<persisted-output")
    assert len(term) < len(big)
    assert read == json.dumps({"content": big})


async def test_turn_budget_never_persists_read_file_results():
    # Per-result thresholds are high; only the per-turn budget is exceeded.
    big = "z" * 4000

    def fake(name, args, **kw):
        return json.dumps({"content": big}) if name == "read_file" else json.dumps({"output": big, "exit_code": 0})

    from environments.tools.budget import BudgetConfig

    budget = BudgetConfig(default_result_size=1_000_000, turn_budget=5000, preview_size=100)
    tools = [TERMINAL, {"type": "function", "function": {"name": "read_file", "parameters": {}}}]
    server = MockServer(
        [reply(None, [call("read_file", {"path": "f"}, "c1"), call("terminal", {"command": "x"}, "c2")]), reply("x")]
    )
    with mock.patch("environments.agent_loop.handle_function_call", side_effect=fake):
        loop = HermesAgentLoop(server, tools, {"terminal", "read_file"}, budget_config=budget)
        try:
            result = await loop.run(user())
        finally:
            from environments.sandboxes import cleanup_vm

            cleanup_vm(loop.task_id)
    read, term = result.messages[2], result.messages[3]
    assert read["content"] == json.dumps({"content": big})  # pinned: never spilled
    assert term["content"].startswith("<persisted-output")
    assert "name" not in read and "name" not in term  # wire shape unchanged


# ---------------------------------------------------------------- events and redaction


async def test_events_emitted_and_secrets_redacted():
    secret = "sk-proj-ABCDEFGHIJKLMNOPQRSTUVWXYZ123456"
    seen: list[events.Event] = []
    events.add_observer(seen.append)

    def fake(name, args, **kw):
        return json.dumps(
            {"output": f"key is {secret}", "exit_code": 124, "error": "Command timed out after 1 seconds"}
        )

    bad_args = json.dumps({"command": f"export OPENAI_API_KEY={secret}"}) + "{"
    server = MockServer(
        [
            reply(
                f"thinking about {secret}",
                [
                    call("terminal", {"command": f"echo {secret}"}, "c1"),
                    call("terminal", bad_args, "c2"),
                    call("nope", {}, "c3"),
                ],
            ),
            reply("done"),
        ]
    )
    try:
        with mock.patch("environments.agent_loop.handle_function_call", side_effect=fake):
            result = await HermesAgentLoop(server, TOOLS, NAMES, task_id="rid").run(user())
    finally:
        events.remove_observer(seen.append)
    kinds = [e.kind for e in seen]
    assert kinds.count("turn_started") == 2 and kinds.count("turn_finished") == 2
    assert kinds.count("tool_call_started") == 3 and kinds.count("tool_call_finished") == 3
    finished = [e for e in seen if e.kind == "tool_call_finished"]
    assert [e.error_kind for e in finished] == ["timeout", "bad_json", "unknown_tool"]
    assert finished[0].exit_code == 124 and finished[0].duration_s >= 0
    turn1 = next(e for e in seen if e.kind == "turn_finished")
    assert turn1.tool_calls == 3 and turn1.latency_s >= 0
    blob = json.dumps([e.to_dict() for e in seen])
    assert secret not in blob
    assert all(secret not in (e.arguments + e.error + e.tool_result) for e in result.tool_errors)
    assert len(result.tool_errors) == 3


async def test_phase2_think_block_shown_as_reasoning_but_kept_in_messages():
    seen: list[events.Event] = []
    events.add_observer(seen.append)
    server = MockServer([reply("<think>plan it</think>\nThe answer is 4.")])
    try:
        result = await HermesAgentLoop(server, [], set(), task_id="think").run(user())
    finally:
        events.remove_observer(seen.append)
    turn = next(e for e in seen if e.kind == "turn_finished")
    assert turn.reasoning == "plan it" and turn.content == "The answer is 4."
    # The conversation itself is untouched: ManagedServer needs it to re-render identically.
    assert result.messages[-1]["content"] == "<think>plan it</think>\nThe answer is 4."


async def test_tool_error_arguments_truncated_for_non_str():
    long_args = {"command": "z" * 1000}
    server = MockServer([reply(None, [{"id": "c", "function": {"name": "ghost", "arguments": long_args}}]), reply("x")])
    result = await HermesAgentLoop(server, TOOLS, NAMES).run(user())
    assert len(result.tool_errors[0].arguments) <= 200


async def test_max_turns_validated():
    with pytest.raises(ValueError, match="max_turns"):
        HermesAgentLoop(MockServer([]), [], set(), max_turns=0)
