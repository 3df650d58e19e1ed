"""`stormbuffer-mcp`: the version-1 protocol as MCP tools and resources over stdio.

Built on the low-level server of the official MCP Python SDK. `cli` parses the command line,
`server` wires the SDK handlers, `tools` and `resources` hold what the host can call and read,
`results` bounds tool output, and `warm` keeps the embedding model loaded between calls.
"""
