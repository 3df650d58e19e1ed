#!/usr/bin/env node
// Gemini CLI hook entry: `node gemini.mjs prompt|post-tool|stop` (the `BeforeAgent`, `AfterTool`
// and `AfterAgent` events) reads one hook event on stdin and prints exactly one JSON line; it
// always exits 0 and never throws. Gemini CLI names MCP tools `mcp_<server>_<tool>`, and its
// events carry no turn id: the candidate marker is kept per session, and each new prompt clears it.
import { pathToFileURL } from 'node:url';

import { createCommandHooks } from './command-hooks.mjs';

export const CANDIDATE_TOOL = /^mcp_stormbuffer_memory_(remember|update)$/;

export const { candidateWritten, markerPath, markCandidate, consumeCandidate, promptHook, postToolHook, stopHook, main } =
  createCommandHooks({ host: 'gemini', promptEvent: 'BeforeAgent', candidateTool: CANDIDATE_TOOL, turnOf: () => 'session' });

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await main(process.argv[2]);
  process.exit(0);
}
