import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { fakeSbuf, projectTree, tempDir } from './fixtures.mjs';

const SERVER = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'hooks', 'mcp.mjs');

function runServer(env, cwd = tempDir()) {
  return spawnSync(process.execPath, [SERVER], {
    cwd,
    env: { ...process.env, STORMBUFFER_SCOPE: '', ...env },
    input: '',
    encoding: 'utf8',
  });
}

test('the MCP server runs sbuf with candidate writes in the scope of the host directory', () => {
  const { nested } = projectTree();
  const sbuf = fakeSbuf({ stdout: '' });
  assert.equal(runServer({ STORMBUFFER_BIN: sbuf.bin, PWD: nested }).status, 0);
  assert.equal(runServer({ STORMBUFFER_BIN: sbuf.bin, PWD: '/no/such/dir' }, nested).status, 0);
  assert.equal(runServer({ STORMBUFFER_BIN: sbuf.bin, STORMBUFFER_SCOPE: 'local', PWD: tempDir() }).status, 0);
  assert.deepEqual(sbuf.calls().map((call) => call.args), [
    ['--project', 'mcp', '--stdio', '--allow-candidate-writes'],
    ['--project', 'mcp', '--stdio', '--allow-candidate-writes'],
    ['--local', 'mcp', '--stdio', '--allow-candidate-writes'],
  ]);
});

test("the MCP server exits with sbuf's status, and 1 when sbuf cannot start", () => {
  assert.equal(runServer({ STORMBUFFER_BIN: fakeSbuf({ stdout: '', exitCode: 3 }).bin }).status, 3);
  assert.equal(runServer({ STORMBUFFER_BIN: path.join(tempDir(), 'missing') }).status, 1);
});

test('SIGTERM reaches sbuf and ends the MCP server the same way', async () => {
  const sbuf = fakeSbuf({ stdout: '', body: 'setTimeout(() => {}, 10000);' });
  const server = spawn(process.execPath, [SERVER], {
    env: { ...process.env, STORMBUFFER_SCOPE: 'global', STORMBUFFER_BIN: sbuf.bin },
    stdio: ['pipe', 'ignore', 'ignore'],
  });
  server.stdin.end();
  const deadline = Date.now() + 5000;
  while (sbuf.calls().length === 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
  assert.equal(sbuf.calls().length, 1);
  const exited = new Promise((resolve) => server.on('exit', (code, signal) => resolve({ code, signal })));
  server.kill('SIGTERM');
  assert.deepEqual(await exited, { code: null, signal: 'SIGTERM' });
});
