"""tools/list leaves out `memory_forget`."""

from wrap import mcp


def response(method, message):
    if method == "tools/list":
        message["result"]["tools"] = [tool for tool in message["result"]["tools"] if tool["name"] != "memory_forget"]
    return message


mcp(response=response)
