"""The per-user memory daemon and the thin doors that reach it.

`stormbuffer-mcp` and `sbuf invoke` start in milliseconds because the expensive part (the MCP SDK,
the model session, projections and vector matrices, the file watchers) lives in one long-running
process per user. `runtime` holds where it listens and who it is (standard library only), `relay`
is the client side the doors use (standard library only: never the SDK, never NumPy), `server` is
the daemon itself.
"""
