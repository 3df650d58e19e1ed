"""Render the version-1 protocol reference from schema/v1/ into docs/reference/ (Markdown and HTML).

Usage: python scripts/render_schema_docs.py [--output DIR]

Every page is built once as a list of blocks (headings, paragraphs, tables, code) and written by
two small renderers, so the Markdown and the HTML always say the same thing. The field tables come
from the schemas themselves (with every `$ref` inlined), the examples from schema/v1/examples/.
`just docs` runs this script; a test fails when the committed pages differ from a fresh render.
"""

from __future__ import annotations

import argparse
import html
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stormbuffer.protocol import schemas

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "schema" / "v1" / "examples"
OUTPUT = ROOT / "docs" / "reference"
OPERATIONS = ("search", "context", "get", "remember", "update", "propose", "supersede", "archive")

CODE_MEANINGS = {
    "invalid_json": "The input is not one JSON value (empty input, trailing text, two objects, invalid UTF-8).",
    "invalid_request": "The request breaks its schema or a field rule: not an object, no integer `version`, "
    "a mismatching `operation`, an unknown key, a wrong type, a bad identifier, enum value or timestamp.",
    "unsupported_version": "`version` is an integer other than 1.",
    "unknown_operation": "The operation is not one of the eight of version 1.",
    "input_too_large": "`sbuf invoke` read more than 262144 bytes of input.",
    "output_too_large": "The answer would exceed its bound: 262144 bytes per `sbuf invoke` line, 65536 bytes "
    "of record body for `get`.",
    "path_denied": "A key names a filesystem location (`path`, `root`, `store`, `*_path`, or any key "
    "containing `file`). Paths are never accepted.",
    "scope_denied": "A requested scope lies outside the selected store view, or the record lies outside the "
    "scope filter or the store's scope.",
    "access_denied": "The record is not agent-readable.",
    "permission_denied": "`access` is `human`, the actor is not `agent`, approval was claimed, or a written "
    "record would not be agent-readable.",
    "not_found": "No record has the identifier in the selected stores.",
    "not_initialized": "The selected store has no `store.toml`; run `sbuf init`.",
    "invalid_state": "The record's lifecycle state does not allow the operation (for example archiving a candidate).",
    "invalid_record": "A canonical record file in a used store is invalid, or a replacement record failed validation.",
    "conflict": "Another process is changing the store or its projection; retry.",
    "internal_error": "Anything else. The message stays generic and never contains paths.",
    "secret_detected": "The record an agent would write contains credential-like material; nothing was written.",
}
OPERATION_ERRORS = {
    "search": ("invalid_request", "path_denied", "scope_denied", "permission_denied", "not_initialized",
               "invalid_record", "conflict", "internal_error"),
    "context": ("invalid_request", "path_denied", "scope_denied", "permission_denied", "not_initialized",
                "invalid_record", "conflict", "internal_error"),
    "get": ("invalid_request", "path_denied", "scope_denied", "access_denied", "permission_denied", "not_found",
            "not_initialized", "invalid_record", "output_too_large", "conflict", "internal_error"),
    "remember": ("invalid_request", "path_denied", "permission_denied", "not_initialized", "scope_denied",
                 "secret_detected", "conflict", "internal_error"),
    "update": ("invalid_request", "path_denied", "permission_denied", "scope_denied", "access_denied",
               "not_found", "not_initialized", "invalid_state", "secret_detected", "conflict", "internal_error"),
    "propose": ("invalid_request", "path_denied", "permission_denied", "not_initialized", "scope_denied",
                "secret_detected", "conflict", "internal_error"),
    "supersede": ("invalid_request", "path_denied", "permission_denied", "scope_denied", "access_denied",
                  "not_found", "not_initialized", "invalid_state", "invalid_record", "secret_detected", "conflict",
                  "internal_error"),
    "archive": ("invalid_request", "path_denied", "permission_denied", "scope_denied", "access_denied",
                "not_found", "not_initialized", "invalid_state", "conflict", "internal_error"),
}  # fmt: skip
ENVELOPE_CODES = ("invalid_json", "unsupported_version", "unknown_operation", "input_too_large", "output_too_large")


# ---- the page model -------------------------------------------------------------------------


@dataclass(frozen=True)
class Heading:
    level: int
    text: str


@dataclass(frozen=True)
class Para:
    text: str


@dataclass(frozen=True)
class Table:
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Code:
    text: str


Block = Heading | Para | Table | Code


@dataclass
class Page:
    name: str
    title: str
    blocks: list[Block]


# ---- describing schemas ----------------------------------------------------------------------


def type_of(node: dict[str, Any]) -> str:
    if "const" in node:
        return f"`{json.dumps(node['const'])}`"
    if "oneOf" in node:
        return " or ".join(type_of(option) for option in node["oneOf"])
    kind = node.get("type", "any")
    if isinstance(kind, list):
        return " or ".join(kind)
    if kind == "array":
        return f"array of {type_of(node.get('items', {}))}"
    if kind == "object" and node.get("title"):
        return f"object ({node['title']})"
    if "enum" in node:
        return f"{kind}: " + ", ".join(f"`{value}`" for value in node["enum"])
    if node.get("format") == "date-time":
        return "string (RFC 3339 timestamp)"
    if "pattern" in node and node.get("title") in ("RecordId", "CanonicalRecordId"):
        return "string (UUID)"
    return str(kind)


def limits_of(node: dict[str, Any]) -> str:
    parts = []
    for low, high, unit in (("minLength", "maxLength", " characters"), ("minimum", "maximum", ""),
                            ("minItems", "maxItems", " items")):  # fmt: skip
        if low in node or high in node:
            parts.append(f"{node.get(low, 0)}..{node.get(high, '')}{unit}".replace(".. ", ".. no limit "))
    if "pattern" in node and node.get("title") not in ("RecordId", "CanonicalRecordId"):
        parts.append(f"pattern `{node['pattern']}`")
    return "; ".join(parts)


def nested_object(node: dict[str, Any]) -> dict[str, Any] | None:
    """The object schema a field holds (directly or as array items), when it has properties."""
    if node.get("type") == "array":
        node = node.get("items", {})
    return node if node.get("type") == "object" and "properties" in node else None


def field_blocks(label: str, schema: dict[str, Any], level: int, seen: set[str]) -> list[Block]:
    """A field table for an object schema, then one for each nested object (each titled type once)."""
    required = set(schema.get("required", ()))
    rows = []
    nested: list[tuple[str, dict[str, Any]]] = []
    for name, node in schema["properties"].items():
        description = " ".join(node.get("description", "").split())
        rows.append((f"`{name}`", type_of(node), "yes" if name in required else "no", limits_of(node), description))
        inner = nested_object(node)
        if inner is not None and inner.get("title", name) not in seen:
            seen.add(inner.get("title", name))
            suffix = "[]" if node.get("type") == "array" else ""
            nested.append((f"{label}.{name}{suffix}" if label else f"{name}{suffix}", inner))
    blocks: list[Block] = [Table(("Field", "Type", "Required", "Limits", "Description"), tuple(rows))]
    for path, inner in nested:
        title = inner.get("title")
        blocks.append(Heading(level, f"`{path}`" + (f" ({title})" if title else "")))
        if inner.get("description"):
            blocks.append(Para(inner["description"]))
        blocks.extend(field_blocks(path, inner, level, seen))
    return blocks


def examples_of(operation: str) -> list[tuple[str, dict[str, Any]]]:
    return [(path.stem, json.loads(path.read_text(encoding="utf-8")))
            for path in sorted((EXAMPLES / operation).glob("*.json"))]  # fmt: skip


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


# ---- pages --------------------------------------------------------------------------------------


def operation_page(operation: str) -> Page:
    request = schemas.bundled(f"{operation}.request")
    result = schemas.bundled(f"{operation}.result")
    blocks: list[Block] = [Para(request["description"]), Heading(2, "Request")]
    blocks += field_blocks("", request, 3, set())
    if "not" in request:
        blocks.append(Para("`scope` and `scopes` cannot both be given."))
    blocks += [Heading(2, "Result"), Para(result["description"])]
    if result.get("type") == "array":
        item = result["items"]
        blocks.append(Para(f"A JSON array of at most {result.get('maxItems', 'any number of')} "
                           f"{item.get('title', 'item')} objects:"))  # fmt: skip
        blocks += field_blocks("[]", item, 3, {item.get("title", "")})
    else:
        blocks += field_blocks("", result, 3, set())
    blocks += [
        Heading(2, "Errors"),
        Para("Besides the envelope-level codes (" + ", ".join(f"`{code}`" for code in ENVELOPE_CODES)
             + "), this operation can answer:"),
        Table(("Code", "Meaning"), tuple((f"`{code}`", CODE_MEANINGS[code]) for code in OPERATION_ERRORS[operation])),
        Heading(2, "Examples"),
        Para("Each example runs against the contract store in `tests/fixtures/contract-store/` in the `project` "
             "view; `receipt_id`, `retrieved_at` and newly generated record ids differ on every run."),
    ]  # fmt: skip
    for stem, example in examples_of(operation):
        command = Para(f"`sbuf --{example['view']} invoke {operation}`")
        blocks += [Heading(3, stem), Para(example["description"]), command, Code(pretty(example["request"])),
                   Code(pretty(example["response"]))]  # fmt: skip
    return Page(operation, f"`{operation}`", blocks)


def purpose(operation: str) -> str:
    """The request schema's description without its "Request of `operation`: " lead."""
    text = schemas.load(f"{operation}.request")["description"].removeprefix(f"Request of `{operation}`: ")
    return text[:1].upper() + text[1:]


def index_page() -> Page:
    envelope = schemas.load("envelope")
    codes = schemas.load("error")["properties"]["code"]["enum"]
    blocks: list[Block] = [
        Para("The version-1 protocol that `sbuf invoke <operation>` and the MCP adapter speak. Every request is "
             "one JSON object with `\"version\": 1`; every answer is one envelope. This reference is generated "
             "from the JSON Schemas in `schema/v1/`; see [the protocol guide](../protocol.md) for the rules "
             "around it."),
        Heading(2, "Envelope"),
        Para(envelope["description"]),
        Code(pretty({"version": 1, "operation": "search", "ok": True, "result": []})),
        Code(pretty({"version": 1, "operation": "get", "ok": False,
                     "error": {"code": "not_found", "message": "record was not found"}})),
        Para("Keys are written in sorted order, compactly, with non-ASCII text unescaped. `sbuf invoke` prints "
             "exactly one line and exits 0 exactly when `ok` is true."),
        Heading(2, "Operations"),
        Table(("Operation", "Purpose"), tuple(
            (f"[`{operation}`]({operation}.md)", purpose(operation))
            for operation in OPERATIONS)),
        Heading(2, "Error codes"),
        Table(("Code", "Meaning"), tuple((f"`{code}`", CODE_MEANINGS[code]) for code in codes)),
        Heading(2, "Limits"),
        Table(("Limit", "Value"), (
            ("request bytes (`sbuf invoke`)", "262144"), ("response line bytes (`sbuf invoke`)", "262144"),
            ("`query`", "2048 bytes"), ("`title`, `body` and other bounded strings", "65536 bytes"),
            ("`limit`", "default 20, clamped to 1..100"), ("`budget`", "default 512, clamped to 1..4096"),
            ("`scope`/`scopes` entries", "1..16"), ("`tags`, `aliases`", "128 items of 1..512 bytes"),
            ("`sources`", "32"), ("source `reference`/`actor`/`revision`/`content_hash`", "2048/256/2048/256 bytes"),
        )),
    ]  # fmt: skip
    return Page("index", "Stormbuffer protocol reference (version 1)", blocks)


# ---- renderers ----------------------------------------------------------------------------------


def to_markdown(page: Page) -> str:
    out = [f"# {page.title}", "", "<!-- Generated by scripts/render_schema_docs.py from schema/v1/; do not edit. -->"]
    for block in page.blocks:
        out.append("")
        if isinstance(block, Heading):
            out.append(f"{'#' * block.level} {block.text}")
        elif isinstance(block, Para):
            out.append(block.text)
        elif isinstance(block, Code):
            out += ["```json", block.text, "```"]
        else:
            out.append("| " + " | ".join(block.headers) + " |")
            out.append("|" + "|".join(" --- " for _ in block.headers) + "|")
            out += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in block.rows]
    return "\n".join(out) + "\n"


_CODE_SPAN = re.compile(r"`([^`]+)`")
_LINK = re.compile(r"\[([^\]]+)\]\(([^)]+)\)")


def inline_html(text: str) -> str:
    """Escape text and turn `code` spans and [links](x.md) into HTML (links to pages of this reference
    become .html; links elsewhere stay as written)."""
    parts = []
    position = 0
    for match in _LINK.finditer(text):
        parts.append(_spans(text[position : match.start()]))
        target = match.group(2)
        if "/" not in target:  # a page of this reference
            target = re.sub(r"\.md(?=$|#)", ".html", target)
        parts.append(f'<a href="{html.escape(target)}">{_spans(match.group(1))}</a>')
        position = match.end()
    parts.append(_spans(text[position:]))
    return "".join(parts)


def _spans(text: str) -> str:
    pieces = _CODE_SPAN.split(text)
    return "".join(f"<code>{html.escape(piece)}</code>" if index % 2 else html.escape(piece)
                   for index, piece in enumerate(pieces))  # fmt: skip


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;line-height:1.5}"
    "table{border-collapse:collapse;margin:1rem 0}th,td{border:1px solid #ccc;padding:.3rem .5rem;"
    "vertical-align:top;text-align:left}pre{background:#f5f5f5;padding:.75rem;overflow-x:auto}"
    "code{font-family:ui-monospace,monospace}"
)


def to_html(page: Page) -> str:
    title = html.escape(page.title.replace("`", ""))
    out = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">', f"<title>{title}</title>",
           f"<style>{STYLE}</style>", "</head>", "<body>",
           "<!-- Generated by scripts/render_schema_docs.py from schema/v1/; do not edit. -->",
           f"<h1>{inline_html(page.title)}</h1>"]  # fmt: skip
    for block in page.blocks:
        if isinstance(block, Heading):
            out.append(f'<h{block.level} id="{slug(block.text)}">{inline_html(block.text)}</h{block.level}>')
        elif isinstance(block, Para):
            out.append(f"<p>{inline_html(block.text)}</p>")
        elif isinstance(block, Code):
            out.append(f"<pre><code>{html.escape(block.text)}</code></pre>")
        else:
            out.append("<table>")
            out.append("<tr>" + "".join(f"<th>{html.escape(header)}</th>" for header in block.headers) + "</tr>")
            out += ["<tr>" + "".join(f"<td>{inline_html(cell)}</td>" for cell in row) + "</tr>" for row in block.rows]
            out.append("</table>")
    out += ["</body>", "</html>"]
    return "\n".join(out) + "\n"


def pages() -> list[Page]:
    return [index_page(), *(operation_page(operation) for operation in OPERATIONS)]


def render(output: Path) -> list[Path]:
    """Write every page as `<name>.md` and `<name>.html`; remove pages that no longer exist."""
    output.mkdir(parents=True, exist_ok=True)
    written = []
    for page in pages():
        for suffix, text in ((".md", to_markdown(page)), (".html", to_html(page))):
            path = output / f"{page.name}{suffix}"
            path.write_text(text, encoding="utf-8")
            written.append(path)
    for stale in sorted(set(output.glob("*.md")) | set(output.glob("*.html"))):
        if stale not in written:
            stale.unlink()
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=OUTPUT, help="target directory")
    for path in render(parser.parse_args().output):
        print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)


if __name__ == "__main__":
    main()
