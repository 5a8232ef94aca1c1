"""A run's results as JSON and back, exactly: the frozen dataclasses of the harness and the
loop, tagged with their type (``run.json``, what ``shopops-chaos merge`` reads).

The encoding is total over what a ``RunResult`` holds — dataclasses, enums, tuples, lists,
frozensets, dicts (any hashable keys), ``Path``, ``bytes``, non-finite floats — and refuses
anything else with the path to the value. Decoding builds only dataclasses and enums
defined in ``harness`` or ``shopops`` (named by module and qualified name); any other name,
and any tag it does not know, is a ``CodecError``: a report folder is data, never code (no
pickle).
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import importlib
import math
from pathlib import Path, PurePath
from typing import Any

__all__ = ["TRUSTED_PACKAGES", "CodecError", "decode", "encode"]

TRUSTED_PACKAGES = ("harness", "shopops", "shopops_contract")


class CodecError(ValueError):
    """A value that cannot be encoded, or JSON that is not an encoding; names where."""


def encode(value: Any, where: str = "$") -> Any:
    """``value`` as JSON-ready data (dicts, lists, str, int, float, bool, None).

    Raises:
        CodecError: a value of a type outside the encoding, naming its path (``$.results[3]``).
    """
    if value is None or isinstance(value, bool | int | str):
        return value if not isinstance(value, enum.Enum) else _enum(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else {"__float__": repr(value)}
    if isinstance(value, enum.Enum):
        return _enum(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"__dc__": _name(type(value)),
                "fields": {f.name: encode(getattr(value, f.name), f"{where}.{f.name}")
                           for f in dataclasses.fields(value) if f.init}}
    if isinstance(value, tuple):
        return {"__tuple__": [encode(v, f"{where}[{i}]") for i, v in enumerate(value)]}
    if isinstance(value, list):
        return [encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, frozenset | set):
        items = [encode(v, f"{where}{{}}") for v in value]
        return {"__frozenset__": sorted(items, key=repr)}
    if isinstance(value, dict):
        return {"__dict__": [[encode(k, f"{where}.key"), encode(v, f"{where}[{k!r}]")]
                             for k, v in value.items()]}
    if isinstance(value, PurePath):
        return {"__path__": str(value)}
    if isinstance(value, bytes):
        return {"__bytes__": base64.b64encode(value).decode("ascii")}
    raise CodecError(f"{where}: a {type(value).__module__}.{type(value).__qualname__} "
                     "cannot be written to run.json")


def decode(data: Any, where: str = "$") -> Any:
    """The value ``encode`` made ``data`` from.

    Raises:
        CodecError: an unknown tag, or a type that is not a dataclass or enum of
            ``TRUSTED_PACKAGES``, naming its path.
    """
    if data is None or isinstance(data, bool | int | float | str):
        return data
    if isinstance(data, list):
        return [decode(v, f"{where}[{i}]") for i, v in enumerate(data)]
    if not isinstance(data, dict) or len(data) not in (1, 2):
        raise CodecError(f"{where}: not an encoded value")
    if "__dc__" in data:
        cls: Any = _resolve(data["__dc__"], where)
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)
                and isinstance(data.get("fields"), dict)):
            raise CodecError(f"{where}: {data['__dc__']!r} is not a dataclass with fields")
        fields = {k: decode(v, f"{where}.{k}") for k, v in data["fields"].items()}
        factory: Any = cls
        try:
            return factory(**fields)
        except (TypeError, ValueError) as exc:
            raise CodecError(f"{where}: {data['__dc__']}: {exc}") from None
    if "__enum__" in data:
        cls = _resolve(data["__enum__"], where)
        if not (isinstance(cls, type) and issubclass(cls, enum.Enum)):
            raise CodecError(f"{where}: {data['__enum__']!r} is not an enum")
        try:
            return cls(data.get("value"))
        except ValueError as exc:
            raise CodecError(f"{where}: {exc}") from None
    ((tag, body),) = data.items() if len(data) == 1 else ((None, None),)
    if tag == "__tuple__" and isinstance(body, list):
        return tuple(decode(v, f"{where}[{i}]") for i, v in enumerate(body))
    if tag == "__frozenset__" and isinstance(body, list):
        return frozenset(decode(v, f"{where}{{}}") for v in body)
    if tag == "__dict__" and isinstance(body, list) and all(
            isinstance(p, list) and len(p) == 2 for p in body):
        return {decode(k, f"{where}.key"): decode(v, f"{where}[{k!r}]") for k, v in body}
    if tag == "__path__" and isinstance(body, str):
        return Path(body)
    if tag == "__bytes__" and isinstance(body, str):
        return base64.b64decode(body, validate=True)
    if tag == "__float__" and body in ("nan", "inf", "-inf"):
        return float(body)
    raise CodecError(f"{where}: unknown tag {sorted(data)!r}")


def _enum(value: enum.Enum) -> dict[str, Any]:
    return {"__enum__": _name(type(value)), "value": encode(value.value)}


def _name(cls: type) -> str:
    if cls.__module__.split(".")[0] not in TRUSTED_PACKAGES or "<locals>" in cls.__qualname__:
        raise CodecError(f"{cls.__module__}.{cls.__qualname__}: only module-level types of "
                         f"{', '.join(TRUSTED_PACKAGES)} go into run.json")
    return f"{cls.__module__}:{cls.__qualname__}"


def _resolve(name: Any, where: str) -> Any:
    if not isinstance(name, str) or ":" not in name:
        raise CodecError(f"{where}: type name {name!r} is not 'module:Class'")
    module, _, qualname = name.partition(":")
    if module.split(".")[0] not in TRUSTED_PACKAGES:
        raise CodecError(f"{where}: {name!r}: only types of {', '.join(TRUSTED_PACKAGES)}")
    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        raise CodecError(f"{where}: no type {name!r} in this harness") from None
    return obj
