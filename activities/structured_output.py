"""Checking a turn's final text against ``TurnConfig.output`` (a JSON schema).

The provider is asked for JSON (``ModelRequest.output_schema``); this module checks what
came back, so a turn that promised structured output never completes with something
else. It covers the JSON-schema keywords pydantic emits for a model: ``type``,
``properties``, ``required``, ``additionalProperties``, ``items``, ``enum``, ``const``,
``anyOf``/``oneOf``/``allOf``, ``$ref`` into ``$defs``, string and number bounds, and
``pattern``. Other keywords are not checked.
"""

from __future__ import annotations

import json
import re
from typing import Any

OUTPUT_ERROR = "OutputValidationError"

_TYPES: dict[str, Any] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}
_FENCE = re.compile(r"^```(?:json)?\s*\n(.*)\n```$", re.DOTALL)


def parse_output(text: str) -> Any:
    """The final answer as JSON (a ```json fence around it is allowed); raises ValueError."""
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1)
    return json.loads(body)


def check_output(text: str, schema: dict[str, Any]) -> str | None:
    """None when ``text`` is JSON valid against ``schema``, else what is wrong."""
    try:
        value = parse_output(text)
    except json.JSONDecodeError as e:
        return f"the final text is not JSON ({e.msg} at position {e.pos}): {text[:200]!r}"
    problems = schema_errors(value, schema, schema)
    if problems:
        return "the final answer does not match the output schema: " + "; ".join(problems[:5])
    return None


def schema_errors(
    value: Any, schema: dict[str, Any], root: dict[str, Any], path: str = "$"
) -> list[str]:
    """Every violation of ``schema`` by ``value``, as ``path: problem`` strings."""
    if "$ref" in schema:
        return schema_errors(value, _resolve(schema["$ref"], root), root, path)
    for combiner in ("anyOf", "oneOf"):
        if combiner in schema:
            options = [schema_errors(value, s, root, path) for s in schema[combiner]]
            if all(options):
                return [f"{path}: matches none of the allowed shapes ({options[0][0]})"]
    errors = [e for s in schema.get("allOf", []) for e in schema_errors(value, s, root, path)]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {json.dumps(value)} is not one of {json.dumps(schema['enum'])}")
    if "const" in schema and value != schema["const"]:
        errors.append(f"{path}: must be {json.dumps(schema['const'])}")
    expected = schema.get("type")
    if expected is not None:
        kinds = expected if isinstance(expected, list) else [expected]
        if not any(_TYPES.get(k, lambda v: True)(value) for k in kinds):
            return [*errors, f"{path}: expected {' or '.join(kinds)}, got {json.dumps(value)[:60]}"]
    if isinstance(value, dict):
        errors += _object_errors(value, schema, root, path)
    elif isinstance(value, list):
        errors += _array_errors(value, schema, root, path)
    elif isinstance(value, str):
        errors += _string_errors(value, schema, path)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        errors += _number_errors(value, schema, path)
    return errors


def _object_errors(
    value: dict[str, Any], schema: dict[str, Any], root: dict[str, Any], path: str
) -> list[str]:
    errors = [
        f"{path}: missing required field {k!r}"
        for k in schema.get("required", [])
        if k not in value
    ]
    props = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        if key in props:
            errors += schema_errors(item, props[key], root, f"{path}.{key}")
        elif extra is False:
            errors.append(f"{path}: unexpected field {key!r}")
        elif isinstance(extra, dict):
            errors += schema_errors(item, extra, root, f"{path}.{key}")
    return errors


def _array_errors(
    value: list[Any], schema: dict[str, Any], root: dict[str, Any], path: str
) -> list[str]:
    errors = []
    if len(value) < schema.get("minItems", 0):
        errors.append(f"{path}: fewer than {schema['minItems']} items")
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        errors.append(f"{path}: more than {schema['maxItems']} items")
    items = schema.get("items")
    if isinstance(items, dict):
        for i, item in enumerate(value):
            errors += schema_errors(item, items, root, f"{path}[{i}]")
    return errors


def _string_errors(value: str, schema: dict[str, Any], path: str) -> list[str]:
    errors = []
    if len(value) < schema.get("minLength", 0):
        errors.append(f"{path}: shorter than {schema['minLength']} characters")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        errors.append(f"{path}: longer than {schema['maxLength']} characters")
    if "pattern" in schema and not re.search(schema["pattern"], value):
        errors.append(f"{path}: does not match {schema['pattern']!r}")
    return errors


def _number_errors(value: float, schema: dict[str, Any], path: str) -> list[str]:
    checks = [
        ("minimum", lambda b: value >= b, "<"),
        ("maximum", lambda b: value <= b, ">"),
        ("exclusiveMinimum", lambda b: value > b, "<="),
        ("exclusiveMaximum", lambda b: value < b, ">="),
    ]
    return [
        f"{path}: {value} {op} {schema[k]}"
        for k, ok, op in checks
        if k in schema and not ok(schema[k])
    ]


def _resolve(ref: str, root: dict[str, Any]) -> dict[str, Any]:
    if not ref.startswith("#/"):
        return {}
    node: Any = root
    for key in ref[2:].split("/"):
        node = node.get(key, {}) if isinstance(node, dict) else {}
    return node if isinstance(node, dict) else {}
