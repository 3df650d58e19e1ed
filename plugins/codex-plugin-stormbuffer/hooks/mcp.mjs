#!/usr/bin/env node
// The plugin's MCP server: `sbuf [scope flag] mcp --stdio --allow-candidate-writes` on inherited
// stdio, with the scope from the environment or the host's working directory (for a team server,
// `stormbuffer-mcp --remote <URL>/mcp`). Codex starts plugin servers inside the plugin directory,
// so the host's directory is `$PWD` (which Codex forwards) when that is a directory, else the
// process's own.
import { spawn } from 'node:child_process';
import { statSync } from 'node:fs';

import { mcpCommand, selectScope } from './lifecycle.cjs';

function hostDirectory() {
  try {
    if (process.env.PWD && statSync(process.env.PWD).isDirectory()) return process.env.PWD;
  } catch {
    // fall through
  }
  return process.cwd();
}

const cwd = hostDirectory();
const [command, ...args] = mcpCommand(selectScope({ env: process.env, cwd }), process.env);
const child = spawn(command, args, { cwd, stdio: 'inherit' });
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => child.kill(signal));
}
child.on('error', () => process.exit(1));
child.on('exit', (code, signal) => {
  if (signal !== null) {
    process.removeAllListeners(signal);
    process.kill(process.pid, signal);
  } else {
    process.exit(code ?? 1);
  }
});
