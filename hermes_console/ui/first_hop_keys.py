"""App bindings run where a key first arrives, not after it has bubbled back to the app.

Textual hands a key to the app's message queue, then forwards it to the focused widget,
which offers it to its handlers and bubbles it up through every container and the screen
back to the app, where the app's own bindings are finally looked up: six message queues
for a key on the main screen. Each queue is a turn of the UI's event loop, and in a flood
each turn waits behind a drain step and for the GIL the runtime's thread holds, so an
operator's pause took 50–350 ms to act (BENCHMARKS P3), most of it in the bubbling.

When nothing on the way could take the key (no widget, screen or modal binds it or
consumes it), Textual's route ends at the app's binding anyway; :func:`app_binding_for`
answers that from the same binding chain Textual walks, and the app runs the binding at
the first queue. Anything else (an input that types the key, a screen or widget binding
it, a modal on top) returns None and the key takes Textual's own route, unchanged.
"""

from __future__ import annotations

from typing import Any

from textual import events
from textual.app import App
from textual.binding import Binding
from textual.dom import DOMNode
from textual.widget import Widget


def app_binding_for(app: App[Any], key: str) -> Binding | None:
    """The app's own binding Textual would run for ``key`` after bubbling, if nothing before
    the app could take it; None when the key must take Textual's route."""
    screen = app.screen
    # Textual's chain: the focused widget, its ancestors, the screen, the app; keys an input
    # consumes are already taken out of what lies beyond it, the keymap already applied.
    chain = screen._binding_chain
    if any(binding.priority for _, bindings in chain for binding in bindings.key_to_bindings.get(key, ())):
        return None  # priority bindings are checked from the app down, first: Textual's route does that
    reachable = screen._modal_binding_chain  # ends at a modal screen: the app is not reached
    if not reachable or reachable[-1][0] is not app:
        return None
    names = events.Key(key, None).name_aliases  # the key_<name> methods Textual's dispatch tries
    for node, bindings in reachable[:-1]:
        if bindings.key_to_bindings.get(key) or _handles_keys(node, names):
            return None
    own = [binding for binding in reachable[-1][1].key_to_bindings.get(key, ()) if not binding.priority]
    return own[0] if len(own) == 1 else None


def _handles_keys(node: DOMNode, names: list[str]) -> bool:
    """The node may act on the key before bindings are looked up: Textual offers every key to
    the ``key_<name>`` methods and to the key handlers of the widgets on the way (an input's,
    a text area's). Widget's own handler only does the former; the app's is the lookup."""
    for name in names:
        if getattr(node, f"key_{name}", None) is not None or getattr(node, f"_key_{name}", None) is not None:
            return True
    return _has_key_handler(type(node))


_HANDLERS: dict[type, bool] = {}


def _has_key_handler(cls: type) -> bool:
    known = _HANDLERS.get(cls)
    if known is None:
        bases = (base for base in cls.__mro__ if base not in (Widget, App))
        known = _HANDLERS[cls] = any("on_key" in vars(base) or "_on_key" in vars(base) for base in bases)
    return known
