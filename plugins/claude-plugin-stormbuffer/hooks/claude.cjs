#!/usr/bin/env node
// Claude Code hook entry: `node claude.cjs prompt|post-tool|stop` reads one hook event on stdin
// and prints exactly one JSON line; it always exits 0 and never throws. Claude Code names a
// plugin's MCP tools `mcp__plugin_<plugin>_<server>__<tool>` (a server registered by hand:
// `mcp__<server>__<tool>`), and its events carry no turn id: the candidate marker is kept per
// session, and each new prompt clears it.
'use strict';

require('./command-hooks.cjs').hostEntry(module, {
  host: 'claude',
  candidateTool: /^mcp__(?:plugin_stormbuffer_)?stormbuffer__memory_(remember|update)$/,
  turnOf: () => 'session',
});
