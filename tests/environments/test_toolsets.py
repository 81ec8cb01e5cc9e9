"""Toolsets and toolset distributions (behaviours 25 and 27)."""

from __future__ import annotations

import random

import pytest

from environments import toolset_distributions as td
from environments import toolsets as ts
from environments.tools import registry


@pytest.fixture
def custom_toolsets():
    created: list[str] = []

    def make(name: str, tools=None, includes=None) -> None:
        ts.create_custom_toolset(name, f"test {name}", tools or [], includes or [])
        created.append(name)

    yield make
    for name in created:
        ts.delete_custom_toolset(name)


# ------------------------------------------------------------------ toolsets


def test_leaf_toolsets_resolve_to_their_tools():
    assert ts.resolve_toolset("terminal") == ["terminal"]
    assert ts.resolve_toolset("file") == ["patch", "read_file", "search_files", "write_file"]
    assert ts.resolve_toolset("web") == ["web_extract", "web_search"]
    assert ts.resolve_toolset("todo") == ["todo"]


def test_composites_include_their_children():
    debugging = ts.resolve_toolset("debugging")
    assert set(debugging) == {"terminal"} | set(ts.resolve_toolset("web")) | set(ts.resolve_toolset("file"))
    assert set(ts.resolve_toolset("safe")) == {"web_search", "web_extract", "vision_analyze", "image_generate"}
    assert "terminal" not in ts.resolve_toolset("safe")


def test_all_and_star_are_the_union_of_everything():
    union = set()
    for name in ts.get_toolset_names():
        union.update(ts.resolve_toolset(name))
    assert ts.resolve_toolset("all") == sorted(union)
    assert ts.resolve_toolset("*") == sorted(union)
    assert ts.validate_toolset("all") and ts.validate_toolset("*")


def test_unknown_toolset_resolves_empty_and_is_invalid():
    assert ts.resolve_toolset("no-such-toolset") == []
    assert not ts.validate_toolset("no-such-toolset")
    assert ts.get_toolset("no-such-toolset") is None
    assert ts.get_toolset_info("no-such-toolset") is None


def test_results_are_sorted():
    for name in ts.get_toolset_names():
        tools = ts.resolve_toolset(name)
        assert tools == sorted(tools), name


def test_every_listed_tool_is_registered():
    for name in ts.get_toolset_names():
        for tool in ts.resolve_toolset(name):
            assert tool in registry, f"{name} lists unregistered tool {tool}"


def test_cycles_and_diamonds_terminate(custom_toolsets):
    custom_toolsets("cyc-a", ["terminal"], ["cyc-b"])
    custom_toolsets("cyc-b", ["todo"], ["cyc-a"])
    assert ts.resolve_toolset("cyc-a") == ["terminal", "todo"]
    assert ts.resolve_toolset("cyc-b") == ["terminal", "todo"]
    custom_toolsets("dia-top", [], ["dia-left", "dia-right"])
    custom_toolsets("dia-left", [], ["file"])
    custom_toolsets("dia-right", ["terminal"], ["file"])
    assert ts.resolve_toolset("dia-top") == sorted(["terminal", *ts.resolve_toolset("file")])


def test_create_custom_toolset_round_trips(custom_toolsets):
    custom_toolsets("mine", ["terminal"], ["file"])
    entry = ts.get_toolset("mine")
    assert entry == {"description": "test mine", "tools": ["terminal"], "includes": ["file"]}
    info = ts.get_toolset_info("mine")
    assert info["is_composite"] and info["tool_count"] == 5
    assert ts.validate_toolset("mine") and "mine" in ts.get_toolset_names()
    # a copy: mutating it does not change the table
    entry["tools"].append("x")
    assert ts.get_toolset("mine")["tools"] == ["terminal"]


def test_builtin_toolsets_cannot_be_redefined():
    with pytest.raises(ValueError, match="built in"):
        ts.create_custom_toolset("file", "x", ["terminal"], [])


def test_resolve_multiple_and_aliases():
    assert ts.resolve_multiple_toolsets(["terminal", "todo", "nope"]) == ["terminal", "todo"]
    assert ts.validate_toolset("terminal_tools")
    assert ts.resolve_toolset("file_tools") == ts.resolve_toolset("file")


# ------------------------------------------------------------------ distributions

EXPECTED_DISTRIBUTIONS = {
    "default", "image_gen", "research", "science", "development", "safe", "balanced", "minimal",
    "terminal_only", "terminal_web", "creative", "reasoning", "browser_use", "browser_only",
    "browser_tasks", "terminal_tasks", "mixed_tasks",
}  # fmt: skip


def test_all_seventeen_distributions_exist_with_valid_probabilities():
    dists = td.list_distributions()
    assert set(dists) == EXPECTED_DISTRIBUTIONS
    for name, entry in dists.items():
        assert entry["description"] and entry["toolsets"], name
        for toolset, percent in entry["toolsets"].items():
            assert 0 < percent <= 100, (name, toolset)
            assert ts.validate_toolset(toolset), (name, toolset)


def test_list_distributions_returns_a_copy():
    dists = td.list_distributions()
    dists["default"]["toolsets"]["web"] = 1
    dists.pop("minimal")
    assert td.get_distribution("default")["toolsets"]["web"] == 100
    assert td.validate_distribution("minimal")


def test_unknown_distribution_raises():
    with pytest.raises(ValueError, match="Unknown distribution"):
        td.sample_toolsets_from_distribution("nope")
    assert td.get_distribution("nope") is None
    assert not td.validate_distribution("nope")


def test_default_returns_all_and_minimal_returns_web():
    assert sorted(td.sample_toolsets_from_distribution("default", random.Random(1))) == sorted(
        td.get_distribution("default")["toolsets"]
    )
    assert td.sample_toolsets_from_distribution("minimal", random.Random(1)) == ["web"]


class _AlwaysHigh(random.Random):
    def random(self) -> float:  # every draw misses every percent < 100
        return 0.999999


def test_never_empty_falls_back_to_highest_probability():
    for name in td.list_distributions():
        picked = td.sample_toolsets_from_distribution(name, _AlwaysHigh())
        assert picked, name
        assert all(isinstance(x, str) for x in picked)
    probs = td.get_distribution("research")["toolsets"]
    assert td.sample_toolsets_from_distribution("research", _AlwaysHigh()) == [max(probs, key=probs.get)]


def test_seeded_rng_is_deterministic_and_varies():
    draws = [td.sample_toolsets_from_distribution("balanced", random.Random(seed)) for seed in range(20)]
    again = [td.sample_toolsets_from_distribution("balanced", random.Random(seed)) for seed in range(20)]
    assert draws == again
    assert len({tuple(d) for d in draws}) > 1
