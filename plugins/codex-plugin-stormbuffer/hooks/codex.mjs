#!/usr/bin/env node
// Codex hook entry: `node codex.mjs prompt|post-tool|stop` reads one hook event on stdin and
// prints exactly one JSON line; it always exits 0 and never throws, so a failing store never
// blocks the host. Codex names the plugin's MCP tools `mcp__stormbuffer__<tool>` and gives every
// event its turn id.
import { pathToFileURL } from 'node:url';

import { createCommandHooks } from './command-hooks.mjs';

export { MAX_EVENT_BYTES, RECALL_TIMEOUT_MS, containsSuccess, parseEvent } from './command-hooks.mjs';

export const CANDIDATE_TOOL = /^mcp__stormbuffer__memory_(remember|update)$/;

export const {
  candidateWritten,
  markerPath,
  markCandidate,
  consumeCandidate,
  promptHook,
  postToolHook,
  stopHook,
  main,
} = createCommandHooks({ host: 'codex', candidateTool: CANDIDATE_TOOL });

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await main(process.argv[2]);
  process.exit(0);
}
