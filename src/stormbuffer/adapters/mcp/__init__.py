"""`stormbuffer-mcp`: the version-1 protocol as MCP tools and resources over stdio.

Built on the low-level server of the official MCP Python SDK, which `sdk` loads without the SDK's
client. `cli` parses the command line, `server` wires the SDK handlers, `tools` and `resources`
hold what the host can call and read, `results` bounds tool output, `idle` gets ready for the
first call while the host is quiet, and `warm` keeps the embedding model loaded between calls.
"""
