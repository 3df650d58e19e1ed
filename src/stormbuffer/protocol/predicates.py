"""Yes/no validity checks compiled from the `schema/v1` files, for the request hot path.

`accepts(name, instance)` gives the same answer as `schemas.validator(name).is_valid(instance)`
without importing `jsonschema`: the schema file, and the files its `$ref`s point into, are compiled
once per process into nested Python checks. Only the keywords the request schemas use are compiled,
each with its Draft 2020-12 meaning as `jsonschema` implements it, plus the strict integers and the
`date-time` format of `schemas.validator`. A schema with any other keyword is refused when compiled,
never half-checked. Why an instance is invalid is left to `schemas.validator`, whose errors carry
the paths and keywords the request error catalogue is keyed by.
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Callable
from functools import cache
from typing import Any, NamedTuple

from . import schemas

Check = Callable[[Any], bool]

# Keywords that never decide validity. `$defs` only holds schemas that `$ref`s point at.
_ANNOTATIONS = frozenset({"$schema", "$id", "$defs", "title", "description"})

_TYPES: dict[str, Check] = {
    "null": lambda value: value is None,
    "boolean": lambda value: isinstance(value, bool),
    "integer": lambda value: isinstance(value, int) and not isinstance(value, bool),  # strict: 1.0 is not
    "number": lambda value: isinstance(value, numbers.Number) and not isinstance(value, bool),
    "string": lambda value: isinstance(value, str),
    "array": lambda value: isinstance(value, list),
    "object": lambda value: isinstance(value, dict),
}


class UnsupportedSchema(ValueError):
    """The schema uses a keyword, or a form of one, that this module does not compile."""


class Document(NamedTuple):
    """The schema document a node sits in (its `$id` is the base of relative `$ref`s)."""

    root: dict[str, Any]


def accepts(name: str, instance: object) -> bool:
    """Whether `instance` is valid against the schema `name`, e.g. `accepts("search.request", {...})`."""
    return predicate(name)(instance)


@cache
def predicate(name: str) -> Check:
    """The compiled check for one schema file."""
    return compile_schema(schemas.load(name))


def compile_schema(schema: dict[str, Any]) -> Check:
    """The check for a whole schema document; its `$id` is the base of its relative `$ref`s."""
    return _compile(schema, Document(schema))


def _compile(node: object, document: Document) -> Check:
    if not isinstance(node, dict):
        raise UnsupportedSchema("only object schemas are compiled")
    if node.get("$id", document.root["$id"]) != document.root["$id"]:
        raise UnsupportedSchema("`$id` is only compiled at the root of a schema document")
    checks = []
    for keyword, value in node.items():
        if keyword in _ANNOTATIONS:
            continue
        if keyword not in _KEYWORDS:
            raise UnsupportedSchema(f"keyword `{keyword}` is not compiled")
        checks.append(_KEYWORDS[keyword](value, node, document))
    return _all(checks)


def _all(checks: list[Check]) -> Check:
    if not checks:
        return lambda _value: True
    if len(checks) == 1:
        return checks[0]
    return lambda value: all(check(value) for check in checks)


# ---- one compiler per keyword: (keyword value, the schema holding it, its document) -> check -----


def _ref(ref: str, _node: dict[str, Any], document: Document) -> Check:
    """The target is compiled in place, so a schema that refers to itself cannot be compiled."""
    try:
        target, holder = schemas.resolve(ref, document.root)
    except (KeyError, ValueError) as exc:
        raise UnsupportedSchema(f"`$ref` {ref} cannot be resolved") from exc
    return _compile(target, Document(holder))


def _type(name: object, _node: dict[str, Any], _document: Document) -> Check:
    if not isinstance(name, str) or name not in _TYPES:
        raise UnsupportedSchema("`type` must name one JSON type")
    return _TYPES[name]


def _properties(properties: dict[str, Any], _node: dict[str, Any], document: Document) -> Check:
    checks = {key: _compile(schema, document) for key, schema in properties.items()}
    return lambda value: (
        not isinstance(value, dict) or all(check(value[key]) for key, check in checks.items() if key in value)
    )


def _additional_properties(allowed: object, node: dict[str, Any], _document: Document) -> Check:
    if allowed is not False:
        raise UnsupportedSchema("only `additionalProperties: false` is compiled")
    known = frozenset(node.get("properties", {}))
    return lambda value: not isinstance(value, dict) or known.issuperset(value)


def _required(keys: list[str], _node: dict[str, Any], _document: Document) -> Check:
    return lambda value: not isinstance(value, dict) or all(key in value for key in keys)


def _not(schema: object, _node: dict[str, Any], document: Document) -> Check:
    check = _compile(schema, document)
    return lambda value: not check(value)


def _const(expected: object, _node: dict[str, Any], _document: Document) -> Check:
    return _enum([expected], _node, _document)


def _enum(options: list[object], _node: dict[str, Any], _document: Document) -> Check:
    if not all(isinstance(option, str) for option in options):  # jsonschema compares other values specially
        raise UnsupportedSchema("only string `enum` and `const` values are compiled")
    allowed = tuple(options)
    return lambda value: value in allowed


def _minimum(bound: object, _node: dict[str, Any], _document: Document) -> Check:
    if not _TYPES["number"](bound):
        raise UnsupportedSchema("`minimum` must be a number")
    is_number = _TYPES["number"]
    return lambda value: not is_number(value) or not (value < bound)  # NaN passes, as in jsonschema


def _length(kind: str, smallest: bool) -> Callable[[object, dict[str, Any], Document], Check]:
    """`minLength`/`maxLength` (strings, in code points) and `minItems`/`maxItems` (arrays)."""
    applies = _TYPES[kind]

    def compile_bound(bound: object, _node: dict[str, Any], _document: Document) -> Check:
        if not isinstance(bound, int) or isinstance(bound, bool):
            raise UnsupportedSchema("length bounds must be integers")
        if smallest:
            return lambda value: not applies(value) or len(value) >= bound
        return lambda value: not applies(value) or len(value) <= bound

    return compile_bound


def _items(schema: object, _node: dict[str, Any], document: Document) -> Check:
    check = _compile(schema, document)
    return lambda value: not isinstance(value, list) or all(check(item) for item in value)


def _pattern(pattern: str, _node: dict[str, Any], _document: Document) -> Check:
    search = re.compile(pattern).search  # unanchored, Python semantics: `$` also matches before a final newline
    return lambda value: not isinstance(value, str) or search(value) is not None


def _format(name: str, _node: dict[str, Any], _document: Document) -> Check:
    if name != "date-time":
        raise UnsupportedSchema(f"format `{name}` is not compiled")

    def conforms(value: object) -> bool:
        try:
            return bool(schemas.is_timestamp(value))
        except ValueError:
            return False

    return conforms


_KEYWORDS: dict[str, Callable[[Any, dict[str, Any], Document], Check]] = {
    "$ref": _ref,
    "type": _type,
    "properties": _properties,
    "additionalProperties": _additional_properties,
    "required": _required,
    "not": _not,
    "const": _const,
    "enum": _enum,
    "minimum": _minimum,
    "minLength": _length("string", smallest=True),
    "maxLength": _length("string", smallest=False),
    "minItems": _length("array", smallest=True),
    "maxItems": _length("array", smallest=False),
    "items": _items,
    "pattern": _pattern,
    "format": _format,
}
