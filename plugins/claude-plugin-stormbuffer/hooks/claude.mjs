#!/usr/bin/env node
// Claude Code hook entry: `node claude.mjs prompt|post-tool|stop` reads one hook event on stdin
// and prints exactly one JSON line; it always exits 0 and never throws. Claude Code names a
// plugin's MCP tools `mcp__plugin_<plugin>_<server>__<tool>` (a server registered by hand:
// `mcp__<server>__<tool>`), and its events carry no turn id: the candidate marker is kept per
// session, and each new prompt clears it.
import { pathToFileURL } from 'node:url';

import { createCommandHooks } from './command-hooks.mjs';

export const CANDIDATE_TOOL = /^mcp__(?:plugin_stormbuffer_)?stormbuffer__memory_(remember|update)$/;

export const { candidateWritten, markerPath, markCandidate, consumeCandidate, promptHook, postToolHook, stopHook, main } =
  createCommandHooks({ host: 'claude', candidateTool: CANDIDATE_TOOL, turnOf: () => 'session' });

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await main(process.argv[2]);
  process.exit(0);
}
