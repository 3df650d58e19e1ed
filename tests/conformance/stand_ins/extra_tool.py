"""tools/list also offers a `memory_search` tool."""

import copy

from wrap import mcp


def response(method, message):
    if method == "tools/list":
        tools = message["result"]["tools"]
        extra = copy.deepcopy(next(tool for tool in tools if tool["name"] == "memory_get"))
        extra["name"] = "memory_search"
        tools.append(extra)
        tools.sort(key=lambda tool: tool["name"])
    return message


mcp(response=response)
