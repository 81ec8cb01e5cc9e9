"""Parsers by name: the decorator that registers them and the lookups."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from environments.tool_call_parsers.base import ToolCallParser

P = TypeVar("P", bound=type[ToolCallParser])

PARSER_REGISTRY: dict[str, type[ToolCallParser]] = {}


def register_parser(name: str) -> Callable[[P], P]:
    """Class decorator adding the parser under ``name``; stack it for aliases."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"parser name must be a non-empty string, got {name!r}")

    def decorate(cls: P) -> P:
        if not (isinstance(cls, type) and issubclass(cls, ToolCallParser)):
            raise TypeError(f"@register_parser({name!r}) needs a ToolCallParser subclass, got {cls!r}")
        existing = PARSER_REGISTRY.get(name)
        # The same class defined again (its module re-executed: a reload, an env file loaded
        # twice) replaces the old one; a different class under a taken name is a conflict.
        reloaded = existing is not None and (existing.__module__, existing.__qualname__) == (
            cls.__module__,
            cls.__qualname__,
        )
        if existing is not None and existing is not cls and not reloaded:
            raise ValueError(f"Tool call parser {name!r} is already registered to {existing.__name__}")
        PARSER_REGISTRY[name] = cls
        if not cls.__dict__.get("name"):
            cls.name = name  # first (innermost) registered name is the canonical one
        return cls

    return decorate


def get_parser(name: str) -> ToolCallParser:
    """A new parser instance (instances carry ``last_errors``, so never share one)."""
    try:
        cls = PARSER_REGISTRY[name]
    except KeyError:
        raise KeyError(f"Tool call parser '{name}' not found. Available parsers: {list_parsers()}") from None
    return cls()


def list_parsers() -> list[str]:
    return sorted(PARSER_REGISTRY)
