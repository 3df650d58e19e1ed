"""The five MCP tools and the write grant that decides which of them may run.

Names, operations, descriptions, annotations and input schemas all come from
`schema/v1/mcp-tools.schema.json` (its `x-mcp` blocks), bundled so that hosts need not resolve
`$ref`s. Every tool is listed in every mode; a write the grant does not cover is refused when it
is called, before its arguments are looked at.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from typing import Any

from stormbuffer.protocol import schemas

WRITES_DISABLED = "MCP write tools are disabled; restart with an explicit host write grant"
CANDIDATES_ONLY = "MCP candidate-write mode permits only remember and update"
CANDIDATE_OPERATIONS = frozenset({"remember", "update"})
WRITE_OPERATIONS = CANDIDATE_OPERATIONS | {"archive"}


class WriteGrant(StrEnum):
    """What the host allowed at startup: nothing, candidates, or candidates and archival."""

    NONE = "none"
    CANDIDATES = "candidates"
    ALL = "all"

    def refusal(self, operation: str) -> str | None:
        """The `permission_denied` message for `operation` under this grant, or None when it may run."""
        if operation not in WRITE_OPERATIONS or self is WriteGrant.ALL:
            return None
        if self is WriteGrant.NONE:
            return WRITES_DISABLED
        return None if operation in CANDIDATE_OPERATIONS else CANDIDATES_ONLY


@dataclass(frozen=True)
class ToolSpec:
    name: str
    operation: str
    description: str
    annotations: dict[str, bool]
    input_schema: dict[str, Any]


@cache
def catalogue() -> dict[str, ToolSpec]:
    """Every tool by name, sorted by name."""
    definitions = schemas.bundled("mcp-tools")["$defs"]
    tools = {}
    for name in sorted(definitions):
        definition = definitions[name]
        meta = definition["x-mcp"]
        input_schema = {key: value for key, value in definition.items() if key != "x-mcp"}
        tools[name] = ToolSpec(name, meta["operation"], meta["description"], meta["annotations"], input_schema)
    return tools


def arguments_for(tool: ToolSpec, arguments: dict[str, Any] | None) -> dict[str, Any]:
    """The protocol request for a call: the agent's arguments with `version` and `operation` imposed."""
    return {**(arguments or {}), "version": 1, "operation": tool.operation}
