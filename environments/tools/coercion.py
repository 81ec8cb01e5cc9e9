"""Argument coercion and validation against a tool's JSON schema.

Models routinely send ``"42"`` for an integer, ``"true"`` for a boolean, a
JSON-encoded string for an array, or a bare value where a list is expected.
We repair the unambiguous cases, then validate what is left and report every
problem in one message the model can act on.

Only the JSON-schema subset our tool schemas use is understood: ``type``
(string or list), ``enum``, ``items``, ``properties``, ``required``,
``minimum``/``maximum``, ``nullable`` and ``additionalProperties``.
"""

from __future__ import annotations

import json
from typing import Any

_TRUE = {"true", "yes", "1", "on"}
_FALSE = {"false", "no", "0", "off"}

_MISSING = object()


def _types(schema: dict[str, Any]) -> list[str]:
    t = schema.get("type")
    if t is None:
        return []
    types = [t] if isinstance(t, str) else list(t)
    if schema.get("nullable") and "null" not in types:
        types.append("null")
    return types


def describe_type(schema: dict[str, Any]) -> str:
    """Human-readable expected type, e.g. 'integer' or 'array of string'."""
    types = [t for t in _types(schema) if t != "null"] or ["any"]
    parts = []
    for t in types:
        if t == "array" and isinstance(schema.get("items"), dict) and schema["items"].get("type"):
            parts.append(f"array of {describe_type(schema['items'])}")
        else:
            parts.append(t)
    text = " or ".join(parts)
    if "enum" in schema:
        text += f" (one of {', '.join(repr(v) for v in schema['enum'])})"
    return text


def _short(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _coerce_to(value: Any, target: str) -> Any:
    """Try to turn ``value`` into JSON type ``target``; return _MISSING if not possible."""
    if target == "integer":
        if isinstance(value, bool):
            return _MISSING
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            text = value.strip()
            try:
                return int(text)
            except ValueError:
                try:
                    f = float(text)
                except ValueError:
                    return _MISSING
                return int(f) if f.is_integer() else _MISSING
        return _MISSING
    if target == "number":
        if isinstance(value, bool):
            return _MISSING
        if isinstance(value, (int, float)):
            return value
        if isinstance(value, str):
            try:
                f = float(value.strip())
            except ValueError:
                return _MISSING
            return int(f) if f.is_integer() and "." not in value and "e" not in value.lower() else f
        return _MISSING
    if target == "boolean":
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        if isinstance(value, str):
            low = value.strip().lower()
            if low in _TRUE:
                return True
            if low in _FALSE:
                return False
        return _MISSING
    if target == "string":
        if isinstance(value, str):
            return value
        # numbers are unambiguous as text; booleans/containers are not
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        return _MISSING
    if target == "array":
        if isinstance(value, list):
            return value
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                try:
                    parsed = json.loads(text)
                except ValueError:
                    return _MISSING
                return parsed if isinstance(parsed, list) else _MISSING
        if value is None or isinstance(value, list):
            return _MISSING
        return [value]  # bare scalar/object where a list was expected
    if target == "object":
        if isinstance(value, dict):
            return value
        if isinstance(value, str) and value.strip().startswith("{"):
            try:
                parsed = json.loads(value)
            except ValueError:
                return _MISSING
            return parsed if isinstance(parsed, dict) else _MISSING
        return _MISSING
    if target == "null":
        if value is None:
            return None
        if isinstance(value, str) and value.strip().lower() in ("null", "none"):
            return None
        return _MISSING
    return _MISSING


def _check_value(value: Any, schema: dict[str, Any], where: str, errors: list[str]) -> Any:
    """Coerce and validate one value; append problems to ``errors``."""
    types = _types(schema)
    if "null" in types and isinstance(value, str) and value.strip().lower() in ("null", "none"):
        return None  # models write the literal "null" for "no value"
    if types:
        # exact type match first, so "null" for a nullable string stays a string
        current = _json_type(value)
        exact = current in types or (current == "integer" and "number" in types)
        if not exact:
            converted: Any = _MISSING
            order = ["null"] + [t for t in types if t != "null"] if "null" in types else types
            for t in order:
                converted = _coerce_to(value, t)
                if converted is not _MISSING:
                    break
            if converted is _MISSING:
                errors.append(f"{where} must be {describe_type(schema)}, got {_json_type(value)} {_short(value)}")
                return value
            value = converted
    if value is None:
        return value
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where} must be one of {', '.join(repr(v) for v in schema['enum'])}, got {_short(value)}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{where} must be >= {schema['minimum']}, got {value}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{where} must be <= {schema['maximum']}, got {value}")
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        value = [_check_value(item, schema["items"], f"{where}[{i}]", errors) for i, item in enumerate(value)]
    if isinstance(value, dict) and isinstance(schema.get("properties"), dict):
        value = _check_object(value, schema, where, errors)
    return value


def _check_object(args: dict[str, Any], schema: dict[str, Any], where: str, errors: list[str]) -> dict[str, Any]:
    props: dict[str, Any] = schema.get("properties") or {}
    required: list[str] = list(schema.get("required") or [])
    prefix = f"{where}." if where else ""
    out: dict[str, Any] = {}
    for key, value in args.items():
        prop = props.get(key)
        if prop is None:
            if schema.get("additionalProperties", True) is False:
                expected = ", ".join(props) or "no arguments"
                errors.append(f"unexpected argument '{prefix}{key}' (expected: {expected})")
            else:
                out[key] = value
            continue
        nullable = "null" in _types(prop)
        if value is None and not nullable and key not in required:
            continue  # an explicit null for an optional argument means "use the default"
        if value is None and not nullable:
            errors.append(f"'{prefix}{key}' is required ({describe_type(prop)}), got null")
            continue
        out[key] = _check_value(value, prop, f"'{prefix}{key}'", errors)
    for key in required:
        if key not in args:
            errors.append(f"'{prefix}{key}' is required ({describe_type(props.get(key, {}))})")
    return out


def coerce_and_validate(args: dict[str, Any], parameters: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """Return (coerced args, None) or (args, "problem; problem") for the model."""
    errors: list[str] = []
    out = _check_object(args, parameters, "", errors)
    if errors:
        return args, "; ".join(errors)
    return out, None
