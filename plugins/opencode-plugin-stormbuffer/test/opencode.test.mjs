import assert from 'node:assert/strict';
import { test } from 'node:test';

import { fakeSbuf, projectTree, tempDir } from '../../codex-plugin-stormbuffer/test/fixtures.mjs';
import { StormbufferPlugin, createLifecycle } from '../stormbuffer.js';

const written = JSON.stringify({ ok: true, operation: 'remember', version: 1, result: { record_id: 'r-1' } });

function fakeClient() {
  const prompts = [];
  return { prompts, session: { prompt: async (request) => prompts.push(request) } };
}

const message = (text) => ({ message: {}, parts: [{ type: 'text', text }] });

test('a user message is recalled for once and its evidence reaches that turn\'s system prompt', async () => {
  const sbuf = fakeSbuf();
  const { root, nested } = projectTree();
  const client = fakeClient();
  const hooks = await StormbufferPlugin({ client, directory: nested, project: {}, worktree: root });
  process.env.STORMBUFFER_BIN = sbuf.bin;
  try {
    await hooks['chat.message']({ sessionID: 's1' }, message('current prompt'));
  } finally {
    delete process.env.STORMBUFFER_BIN;
  }
  assert.deepEqual(sbuf.calls().map((call) => call.args), [['--project', 'invoke', 'context']]);
  assert.equal(sbuf.calls()[0].stdin, '{"version":1,"query":"current prompt","budget":512}\n');
  const output = { system: ['base'] };
  await hooks['experimental.chat.system.transform']({ sessionID: 's1' }, output);
  assert.equal(output.system.length, 2);
  assert.match(output.system[1], /^The following is untrusted evidence from Stormbuffer/);
  assert.ok(output.system[1].includes('receipt-1'));
  const other = { system: [] };
  await hooks['experimental.chat.system.transform']({ sessionID: 'other' }, other);
  assert.deepEqual(other.system, []);
});

test('failing, empty or missing recall leaves the system prompt alone', async () => {
  for (const retrieveContext of [async () => null, async () => '{"version":1,"ok":false}', async () => { throw new Error('x'); }]) {
    const lifecycle = createLifecycle({ client: fakeClient(), directory: tempDir() }, { scope: 'global', retrieveContext });
    await lifecycle.chatMessage({ sessionID: 's' }, message('current prompt'));
    const output = { system: [] };
    await lifecycle.systemTransform({ sessionID: 's' }, output);
    assert.deepEqual(output.system, []);
  }
});

test('an idle session gets the capture review once; a review turn is never recalled for nor reviewed', async () => {
  const client = fakeClient();
  let recalls = 0;
  const retrieveContext = async () => { recalls += 1; return null; };
  const lifecycle = createLifecycle({ client, directory: tempDir() }, { scope: 'local', retrieveContext });
  await lifecycle.chatMessage({ sessionID: 's' }, message('current prompt'));
  await lifecycle.event({ event: { type: 'session.idle', properties: { sessionID: 's' } } });
  await lifecycle.event({ event: { type: 'session.idle', properties: { sessionID: 's' } } });
  assert.equal(client.prompts.length, 1);
  const [request] = client.prompts;
  assert.deepEqual(request.path, { id: 's' });
  const { text } = request.body.parts[0];
  assert.ok(text.startsWith('[stormbuffer:capture-review]\n'));
  assert.match(text, /selected local scope/);
  assert.match(text, /Submit nothing for routine completion/);
  await lifecycle.chatMessage({ sessionID: 's' }, message(text));
  await lifecycle.event({ event: { type: 'session.idle', properties: { sessionID: 's' } } });
  assert.equal(client.prompts.length, 1);
  assert.equal(recalls, 1);
});

test('a candidate written during the turn replaces the review; other tools do not', async () => {
  const client = fakeClient();
  const lifecycle = createLifecycle({ client, directory: tempDir() }, { scope: 'global', retrieveContext: async () => null });
  await lifecycle.chatMessage({ sessionID: 'a' }, message('first'));
  await lifecycle.toolAfter({ tool: 'bash', sessionID: 'a' }, { output: written });
  await lifecycle.toolAfter({ tool: 'stormbuffer_memory_remember', sessionID: 'a' }, { output: written });
  await lifecycle.event({ event: { type: 'session.idle', properties: { sessionID: 'a' } } });
  assert.equal(client.prompts.length, 0);
  await lifecycle.chatMessage({ sessionID: 'a' }, message('second'));
  await lifecycle.toolAfter({ tool: 'bash', sessionID: 'a' }, { output: written });
  await lifecycle.event({ event: { type: 'session.idle', properties: { sessionID: 'a' } } });
  assert.equal(client.prompts.length, 1);
});

test('the MCP server is registered with candidate writes unless one is configured', async () => {
  const lifecycle = createLifecycle({ client: fakeClient(), directory: tempDir() }, { scope: 'project', env: {} });
  const settings = {};
  await lifecycle.config(settings);
  assert.deepEqual(settings.mcp.stormbuffer, {
    type: 'local', command: ['sbuf', '--project', 'mcp', '--stdio', '--allow-candidate-writes'], enabled: true,
  });
  const own = { mcp: { stormbuffer: { type: 'remote', url: 'http://127.0.0.1:1' } } };
  await lifecycle.config(own);
  assert.equal(own.mcp.stormbuffer.type, 'remote');
});
