#!/usr/bin/env node
// Gemini CLI hook entry: `node gemini.cjs prompt|post-tool|stop` (the `BeforeAgent`, `AfterTool`
// and `AfterAgent` events) reads one hook event on stdin and prints exactly one JSON line; it
// always exits 0 and never throws. Gemini CLI names MCP tools `mcp_<server>_<tool>`, and its
// events carry no turn id: the candidate marker is kept per session, and each new prompt clears it.
'use strict';

require('./command-hooks.cjs').hostEntry(module, {
  host: 'gemini',
  promptEvent: 'BeforeAgent',
  candidateTool: /^mcp_stormbuffer_memory_(remember|update)$/,
  turnOf: () => 'session',
});
