"""`content[0].text` is pretty-printed, no longer the compact JSON of `structuredContent`."""

import json

from wrap import mcp, tool_call_result


def response(method, message):
    result = tool_call_result(method, message)
    if result is not None and result.get("structuredContent") is not None:
        result["content"][0]["text"] = json.dumps(result["structuredContent"], indent=1)
    return message


mcp(response=response)
