"""The contract's machine-readable schema (``schema/*.json``): what the harness reads from a
loop's checkpoint database and from each row's ``state_json``.

``docs/contract.md`` and the judge both come from these files: the judge validates every
``state_json`` against ``state.schema.json`` (JSON Schema 2020-12, through the
``jsonschema`` library) and looks for the tables and columns of ``checkpoint-db.json``;
``markdown()`` renders both as the tables ``docs/contract.md`` shows (a test keeps them
equal). Run ``python -m shopops_contract.schema`` to print them.
"""

from __future__ import annotations

import json
import sys
from functools import cache
from importlib import resources
from typing import Any

__all__ = ["CURRENT_VERSION", "REQUIRED_STATE_FIELDS", "checkpoint_db", "markdown",
           "optional_columns", "partial_state_problems", "required_columns", "state_problems",
           "state_schema"]


@cache
def _load(name: str) -> dict[str, Any]:
    text = resources.files("shopops_contract").joinpath("schema", name).read_text("utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def state_schema() -> dict[str, Any]:
    """``state.schema.json``: the JSON Schema of a version-2 ``state_json``."""
    return _load("state.schema.json")


def checkpoint_db() -> dict[str, Any]:
    """``checkpoint-db.json``: the tables and columns the harness reads."""
    return _load("checkpoint-db.json")


#: The ``schema_version`` of the rows this contract's ``state_json`` describes.
CURRENT_VERSION: int = checkpoint_db()["schema_version"]
#: The fields every version-2 ``state_json`` must hold.
REQUIRED_STATE_FIELDS: tuple[str, ...] = tuple(state_schema()["required"])


def required_columns(table: str) -> tuple[str, ...]:
    """The columns ``table`` must have (``KeyError``: not a table of the contract)."""
    return tuple(checkpoint_db()["tables"][table]["required"])


def optional_columns(table: str) -> tuple[str, ...]:
    """The columns the harness reads from ``table`` when they exist."""
    return tuple(checkpoint_db()["tables"][table].get("optional", {}))


@cache
def _validator() -> Any:
    from jsonschema import Draft202012Validator  # imported when first asked: the loop never

    schema = state_schema()
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


@cache
def _partial_validator() -> Any:
    from jsonschema import Draft202012Validator

    schema = {k: v for k, v in state_schema().items() if k not in ("required", "if", "then")}
    return Draft202012Validator(schema)


def partial_state_problems(state: object) -> tuple[str, ...]:
    """``state_problems`` for an object that may leave fields out (a target's history
    reports only what its storage keeps): the fields it holds must have the contract's
    types; none is required."""
    return _problems(_partial_validator(), state)


def state_problems(state: object) -> tuple[str, ...]:
    """Why ``state`` (a decoded ``state_json``) is not a version-2 state of the contract:
    one line per problem, naming the field (``field 'step': -1 is less than the minimum of
    0``), in a stable order; ``()`` when it is one. Extra fields are never a problem."""
    return _problems(_validator(), state)


def _problems(validator: Any, state: object) -> tuple[str, ...]:
    found = []
    for error in validator.iter_errors(state):
        where = ".".join(str(p) for p in error.absolute_path)
        if error.validator == "required":
            missing = str(error.message).split("'")[1] if "'" in error.message else "?"
            where = ".".join(filter(None, (where, missing)))
            found.append(f"field {where!r}: required by docs/contract.md, missing")
        elif error.validator == "oneOf" and where == "draft":
            found.append("field 'draft': must be null or an object with string fields to, "
                         "subject, body")
        elif where:
            found.append(f"field {where!r}: {error.message[:200]}")
        else:
            found.append(f"state_json: {error.message[:200]}")
    return tuple(sorted(found))


def markdown() -> str:
    """The contract's tables as Markdown: the checkpoint database's tables and columns,
    then every field of ``state_json`` (what ``docs/contract.md`` shows between its
    ``generated`` markers)."""
    out = ["| table | column | required | what |", "|---|---|---|---|"]
    for table, spec in checkpoint_db()["tables"].items():
        for kind in ("required", "optional"):
            for column, about in spec.get(kind, {}).items():
                need = "yes" if kind == "required" else "no"
                if kind == "required" and spec["when"] != "always":
                    need = f"when {spec['when']}"
                out.append(f"| `{table}` | `{column}` | {need} | {about} |")
    schema = state_schema()
    required = set(schema["required"])
    out += ["", "| `state_json` field | type | required | what |", "|---|---|---|---|"]
    for name, spec in schema["properties"].items():
        kind = spec.get("type", "one of " + ", ".join(f"`{v}`" for v in spec["enum"])
                        if "enum" in spec else "null or object {to, subject, body}")
        kinds = " or ".join(kind) if isinstance(kind, list) else kind
        need = "yes" if name in required else ("with `order_note`" if name.startswith("note_")
                                               else "no")
        out.append(f"| `{name}` | {kinds} | {need} | {spec.get('description', '')} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":  # pragma: no cover - a convenience for editing the docs
    sys.stdout.write(markdown())
