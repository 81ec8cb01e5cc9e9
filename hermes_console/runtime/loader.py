"""Find the env class an operator named: ``path/to/env.py[:Class]``,
``package.module:Class``, or a module holding exactly one concrete BaseEnv subclass.

Imports atroposlib, so call it on the runtime thread (it is slow to import).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from hermes_console.runtime.errors import ConfigError, close_matches


def split_ref(ref: str) -> tuple[str, str | None]:
    """``"a/b.py:Cls"`` -> ("a/b.py", "Cls"); a bare path/module has no class."""
    target, sep, cls_name = ref.rpartition(":")
    if not sep or not target or os.sep in cls_name or "." in cls_name:
        return ref, None
    return target, cls_name or None


def _is_file_ref(target: str) -> bool:
    return target.endswith(".py") or os.sep in target or Path(target).is_file()


def _load_file(target: str) -> ModuleType:
    path = Path(target).expanduser()
    if not path.is_file():
        raise ConfigError(f"env file {target!r} does not exist; expected a Python file such as path/to/my_env.py")
    path = path.resolve()
    # A unique module name per file, so two envs named env.py do not clash.
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:8]
    name = f"hermes_user_env_{path.stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"env file {target!r} cannot be imported; expected a Python source file")
    module = importlib.util.module_from_spec(spec)
    # Env files often import their siblings (helpers, datasets) by plain name.
    parent = str(path.parent)
    if parent not in sys.path:
        sys.path.insert(0, parent)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        sys.modules.pop(name, None)
        raise ConfigError(f"env file {target!r} has a syntax error at line {exc.lineno}: {exc.msg}") from exc
    except Exception as exc:
        sys.modules.pop(name, None)
        raise ConfigError(f"env file {target!r} raised while importing: {type(exc).__name__}: {exc}") from exc
    return module


def _load_module(target: str) -> ModuleType:
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as exc:
        if exc.name and target.startswith(exc.name):
            raise ConfigError(
                f"env module {target!r} was not found (no module named {exc.name!r}); expected "
                "'package.module:Class' importable from here, or a path to a .py file"
            ) from exc
        raise ConfigError(f"env module {target!r} failed to import: {exc}") from exc
    except SyntaxError as exc:
        raise ConfigError(
            f"env module {target!r} has a syntax error in {exc.filename} line {exc.lineno}: {exc.msg}"
        ) from exc
    except Exception as exc:
        raise ConfigError(f"env module {target!r} raised while importing: {type(exc).__name__}: {exc}") from exc


def env_classes_in(module: ModuleType) -> list[type]:
    """Concrete BaseEnv subclasses defined in ``module`` (or its submodules, for packages)."""
    from atroposlib.envs.base import BaseEnv

    found = []
    prefix = module.__name__ + "."
    for value in vars(module).values():
        if (
            inspect.isclass(value)
            and issubclass(value, BaseEnv)
            and value is not BaseEnv
            and not inspect.isabstract(value)
            and (value.__module__ == module.__name__ or value.__module__.startswith(prefix))
        ):
            if value not in found:
                found.append(value)
    return found


def _classes_in_submodules(package: ModuleType) -> list[type]:
    """A package naming no class itself: look one level down (e.g. ``pkg/env.py``)."""
    import pkgutil

    found: list[type] = []
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("_"):
            continue
        sub = _load_module(f"{package.__name__}.{info.name}")
        for cls in env_classes_in(sub):
            if cls not in found:
                found.append(cls)
    return found


def load_env_class(ref: Any) -> type:
    """Resolve ``ref`` (a string reference or a class) to a concrete BaseEnv subclass."""
    from atroposlib.envs.base import BaseEnv

    if inspect.isclass(ref):
        if not issubclass(ref, BaseEnv):
            raise ConfigError(f"{ref.__name__} is not a subclass of atroposlib BaseEnv")
        return ref
    if not isinstance(ref, str) or not ref.strip():
        raise ConfigError(
            f"env reference {ref!r} is empty; expected 'path/to/env.py[:Class]' or 'package.module:Class'"
        )
    target, cls_name = split_ref(ref.strip())
    module = _load_file(target) if _is_file_ref(target) else _load_module(target)
    candidates = env_classes_in(module)
    if not candidates and not cls_name and hasattr(module, "__path__"):
        candidates = _classes_in_submodules(module)
    where = f"env file {target!r}" if _is_file_ref(target) else f"module {target!r}"
    if cls_name:
        value = getattr(module, cls_name, None)
        if value is None:
            names = [c.__name__ for c in candidates] or [n for n in vars(module) if not n.startswith("_")]
            listing = f" Env classes there: {', '.join(c.__name__ for c in candidates)}." if candidates else ""
            raise ConfigError(f"{where} has no class {cls_name!r}.{close_matches(cls_name, names)}{listing}")
        if not inspect.isclass(value) or not issubclass(value, BaseEnv):
            raise ConfigError(f"{where}: {cls_name!r} is not a subclass of atroposlib BaseEnv")
        if inspect.isabstract(value):
            missing = ", ".join(sorted(getattr(value, "__abstractmethods__", ())))
            raise ConfigError(f"{where}: {cls_name!r} is abstract (does not implement: {missing})")
        return value
    if not candidates:
        raise ConfigError(
            f"{where} defines no env class; expected a concrete subclass of atroposlib BaseEnv "
            "(e.g. HermesAgentBaseEnv). Name one with 'path:Class'."
        )
    if len(candidates) > 1:
        listed = ", ".join(c.__name__ for c in candidates)
        raise ConfigError(f"{where} defines several env classes ({listed}); pick one with '{target}:Class'")
    return candidates[0]
