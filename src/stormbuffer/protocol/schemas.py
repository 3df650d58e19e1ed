"""The version-1 JSON Schemas: loading them, validating against them, and bundling them.

The schema files ship inside the package as `stormbuffer/schema/v1/<name>.schema.json` and refer to
each other by relative URI (`"$ref": "source.schema.json"`); a registry holding every file resolves
those references. `jsonschema` and `referencing` are imported only when first needed; the request
hot path avoids them altogether through the checks `predicates` compiles from the same files.
"""

from __future__ import annotations

import json
from functools import cache
from importlib.resources import files
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urljoin

from stormbuffer.core.timestamps import Timestamp

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

    from jsonschema.protocols import Validator
    from referencing import Registry

SUFFIX = ".schema.json"
# Keys that locate a schema document; an inlined copy of a document drops them.
_DOCUMENT_KEYS = ("$schema", "$id", "$defs")


def _directory() -> Traversable:
    return files("stormbuffer") / "schema" / "v1"


def names() -> list[str]:
    """Every schema name (the file name without `.schema.json`), sorted."""
    return sorted(entry.name.removesuffix(SUFFIX) for entry in _directory().iterdir() if entry.name.endswith(SUFFIX))


def load(name: str) -> dict[str, Any]:
    """A fresh copy of one schema, e.g. `load("search.request")`."""
    return json.loads((_directory() / (name + SUFFIX)).read_text(encoding="utf-8"))


@cache
def registry() -> Registry:
    """Every schema keyed by its `$id`, so that relative `$ref`s resolve."""
    from referencing import Registry
    from referencing.jsonschema import DRAFT202012

    documents = [load(name) for name in names()]
    return Registry().with_resources((doc["$id"], DRAFT202012.create_resource(doc)) for doc in documents).crawl()


@cache
def validator(name: str) -> Validator:
    """A Draft 2020-12 validator for one schema, checking the `date-time` and `uuid` formats.

    Integers are strict, as on the wire: `1.0` is a number but not an integer.
    """
    from jsonschema import Draft202012Validator, FormatChecker, validators

    strict_integers = Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _checker, value: isinstance(value, int) and not isinstance(value, bool)
    )
    validator_class = validators.extend(Draft202012Validator, type_checker=strict_integers)
    formats = FormatChecker(formats=("uuid",))
    formats.checks("date-time", raises=ValueError)(is_timestamp)
    return validator_class(load(name), registry=registry(), format_checker=formats)


def is_timestamp(value: object) -> bool:
    """RFC 3339 with a mandatory offset, parsed exactly as the core parses record timestamps."""
    if isinstance(value, str):
        Timestamp.parse(value)
    return True


@cache
def document(uri: str) -> dict[str, Any]:
    """The schema file whose `$id` is `uri` (files are named after the last segment of their `$id`);
    KeyError when there is none. Shared: do not modify it."""
    try:
        found = load(uri.rpartition("/")[2].removesuffix(SUFFIX))
    except OSError:
        raise KeyError(uri) from None
    if found.get("$id") != uri:
        raise KeyError(uri)
    return found


def resolve(ref: str, base: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The schema a `$ref` in the document `base` points at, and the document holding it. Fragments
    are JSON pointers; ValueError for any other, KeyError when nothing is there."""
    uri, _, fragment = urljoin(base["$id"], ref).partition("#")
    holder = base if uri == base["$id"] else document(uri)
    target: Any = holder
    if fragment and not fragment.startswith("/"):
        raise ValueError("`$ref` fragments must be JSON pointers")
    for token in unquote(fragment).split("/")[1:] if fragment else ():
        target = target[token.replace("~1", "/").replace("~0", "~")]
    return target, holder


def bundled(name: str) -> dict[str, Any]:
    """One schema with every `$ref` replaced by the schema it points at, for hosts that cannot resolve
    references. Keywords next to a `$ref` are annotations only (a test enforces it), so they are merged
    over the inlined schema.
    """
    schema = load(name)
    out = _inline(schema, schema)
    del out["$id"]
    return out


def _inline(node: Any, base: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_inline(item, base) for item in node]
    if not isinstance(node, dict):
        return node
    inlined = {key: _inline(value, base) for key, value in node.items() if key != "$ref"}
    if "$ref" not in node:
        return inlined
    target, holder = resolve(node["$ref"], base)
    content = _inline(target, holder)
    for key in _DOCUMENT_KEYS:
        content.pop(key, None)
    return {**content, **inlined}
