#!/usr/bin/env node
// Codex hook entry: `node codex.cjs prompt|post-tool|stop` reads one hook event on stdin and
// prints exactly one JSON line; it always exits 0 and never throws, so a failing store never
// blocks the host. Codex names the plugin's MCP tools `mcp__stormbuffer__<tool>` and gives every
// event its turn id. CommonJS, like the modules it loads: a hook is a process per event, and
// Node.js starts a CommonJS script several milliseconds sooner than an ES module.
'use strict';

require('./command-hooks.cjs').hostEntry(module, {
  host: 'codex',
  candidateTool: /^mcp__stormbuffer__memory_(remember|update)$/,
});
