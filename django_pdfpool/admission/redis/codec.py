"""A job's outcome as JSON, for sharers in other processes: ``{"ok": encode(result)}`` or
``{"error": {module, name, args, attrs, message}}``, rebuilt only as a builtin exception or
one of ``django_pdfpool.exceptions`` (never a class the data names: docs/security.md)."""

from __future__ import annotations

import builtins
import json
from collections.abc import Callable
from typing import Any

from ... import exceptions
from ...exceptions import RemoteJobError, ResultTooLarge

Encode = Callable[[Any], Any]
Decode = Callable[[Any], Any]


def encode_outcome(
    result: Any, error: BaseException | None, *, encode: Encode | None = None, limit: int
) -> str:
    """The outcome as JSON of at most ``limit`` bytes (UTF-8); total: at worst, the error's type."""
    what = "result" if error is None else f"error {type(error).__qualname__}"
    if error is None:
        try:
            text = _dumps({"ok": encode(result) if encode is not None else result})
        except Exception as exc:  # not JSON-able, or the encode hook failed
            name = f"{type(result).__module__}.{type(result).__qualname__}"
            error = RemoteJobError(name, f"the result cannot travel as JSON: {_shown(exc, str)}")
    if error is not None:
        try:
            text = _dumps({"error": _error(error)})
        except Exception:  # an exception no part of which can be shown
            text = _dumps({"error": _bare(type(error))})
    size = len(text.encode())
    if size > limit:
        too_large = ResultTooLarge(what, f"{size} bytes as JSON, over the limit of {limit} bytes")
        text = _dumps({"error": _error(too_large)})
    return text


def decode_outcome(text: str, *, decode: Decode | None = None) -> tuple[Any, BaseException | None]:
    """``(result, None)`` or ``(None, exception)`` from ``encode_outcome``'s text."""
    outcome = json.loads(text)
    if "error" in outcome:
        return None, _rebuild(outcome["error"])
    value = outcome.get("ok")
    return (decode(value) if decode is not None else value), None


def _dumps(value: Any) -> str:
    """Compact JSON; ASCII-escaped only where UTF-8 cannot carry it (lone surrogates)."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    try:
        text.encode()
    except UnicodeEncodeError:
        text = json.dumps(value, allow_nan=False, separators=(",", ":"))
    return text


def _shown(value: object, show: Callable[[object], str]) -> str:
    """``str(value)`` or ``repr(value)``, or a stand-in if that raises."""
    try:
        return show(value)
    except Exception:
        return f"<{type(value).__qualname__} that {show.__name__}() cannot show>"


def _jsonable(value: Any) -> bool:
    try:
        _dumps(value)
    except Exception:
        return False
    return True


def _error(error: BaseException) -> dict[str, Any]:
    cls = type(error)
    attrs = {
        name: value
        for name, value in getattr(error, "__dict__", {}).items()
        if not name.startswith("__") and _jsonable(value)
    }
    return {
        **_bare(cls),
        "args": [arg if _jsonable(arg) else _shown(arg, repr) for arg in error.args],
        "attrs": attrs,
        "message": _shown(error, str),
    }


def _bare(cls: type[BaseException]) -> dict[str, Any]:
    """An exception by its type alone."""
    shown = f"<{cls.__qualname__} that cannot be shown>"
    return {"module": cls.__module__, "name": cls.__qualname__, "message": shown}


def _rebuild(data: dict[str, Any]) -> BaseException:
    module, name = str(data.get("module", "")), str(data.get("name", ""))
    args, attrs = list(data.get("args") or []), dict(data.get("attrs") or {})
    message = str(data.get("message", ""))
    home = {"builtins": builtins, exceptions.__name__: exceptions}.get(module)  # no other module
    cls = None if home is None else getattr(home, name, None)
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        return RemoteJobError(f"{module}.{name}", message)
    try:
        if module == "builtins":
            error = cls(*args)
        else:  # our own classes: no __init__, whose signature args may not fit
            error = cls.__new__(cls)
            error.args = tuple(args)
        if attrs:
            error.__dict__.update(attrs)
    except Exception:
        return RemoteJobError(f"{module}.{name}", message)
    return error
