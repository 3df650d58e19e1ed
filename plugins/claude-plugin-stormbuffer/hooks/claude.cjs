#!/usr/bin/env node
// Claude Code hook entry: `node claude.cjs prompt|post-tool|stop` reads one hook event on stdin
// and prints exactly one JSON line; it always exits 0 and never throws. Claude Code names a
// plugin's MCP tools `mcp__plugin_<plugin>_<server>__<tool>` (a server registered by hand:
// `mcp__<server>__<tool>`), and its events carry no turn id: the candidate marker is kept per
// session, and each new prompt clears it.
'use strict';

const { createCommandHooks } = require('./command-hooks.cjs');

const CANDIDATE_TOOL = /^mcp__(?:plugin_stormbuffer_)?stormbuffer__memory_(remember|update)$/;

const { candidateWritten, markerPath, markCandidate, consumeCandidate, promptHook, postToolHook, stopHook, main } =
  createCommandHooks({ host: 'claude', candidateTool: CANDIDATE_TOOL, turnOf: () => 'session' });

module.exports = {
  CANDIDATE_TOOL,
  candidateWritten,
  markerPath,
  markCandidate,
  consumeCandidate,
  promptHook,
  postToolHook,
  stopHook,
  main,
};

if (require.main === module) main(process.argv[2]).then(() => process.exit(0));
