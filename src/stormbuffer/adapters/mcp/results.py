"""Tool results: the protocol envelope as `structuredContent` and as one compact JSON text block.

`isError` is true exactly when the envelope's `ok` is false, so protocol failures reach the agent
in-band. Output is bounded: an envelope over 120 KiB, or a whole result over 240 KiB, is replaced
by an `output_too_large` failure for the same operation.
"""

from __future__ import annotations

from typing import Any

from mcp_types import CallToolResult, TextContent

from stormbuffer.protocol.invoke import encode, failure

MAX_ENVELOPE_BYTES = 122880
MAX_RESULT_BYTES = 245760
TOO_LARGE = "response exceeds the bounded MCP tool output"


def tool_result(envelope: dict[str, Any]) -> CallToolResult:
    """The bounded `CallToolResult` carrying `envelope`."""
    text = encode(envelope)
    result = _result(envelope, text)
    if len(text.encode("utf-8")) > MAX_ENVELOPE_BYTES or _size(result) > MAX_RESULT_BYTES:
        envelope = failure(envelope["operation"], "output_too_large", TOO_LARGE)
        result = _result(envelope, encode(envelope))
    return result


def _result(envelope: dict[str, Any], text: str) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(text=text)], structured_content=envelope, is_error=envelope.get("ok") is not True
    )


def _size(result: CallToolResult) -> int:
    return len(result.model_dump_json(by_alias=True, exclude_none=True).encode("utf-8"))
