import assert from 'node:assert/strict';
import { test } from 'node:test';

import { CAPTURE_MARKER } from 'codex-plugin-stormbuffer';
import { contextResult, envelope, fakeSbuf, projectTree, tempDir } from 'codex-plugin-stormbuffer/test/fixtures';

import stormbuffer, { createLifecycle } from '../src/index.js';

const NO_SCOPE = {};
const FLAGS = { global: [], project: ['--project'], local: ['--local'] };

function fakePi() {
  const handlers = {};
  const sent = [];
  return {
    handlers,
    sent,
    on: (name, handler) => {
      handlers[name] = handler;
    },
    sendMessage: (message, options) => sent.push({ message, options }),
  };
}

test('1: every scope recalls once and returns one hidden context message', async () => {
  for (const [scope, flags] of Object.entries(FLAGS)) {
    const sbuf = fakeSbuf();
    const lifecycle = createLifecycle(fakePi(), { scope, command: sbuf.bin, env: NO_SCOPE });
    const result = await lifecycle.beforeAgentStart({ prompt: 'current prompt' }, { cwd: tempDir() });
    assert.equal(result.message.customType, 'stormbuffer-context');
    assert.equal(result.message.display, false);
    assert.ok(result.message.content.includes('receipt-1'));
    const calls = sbuf.calls();
    assert.equal(calls.length, 1);
    assert.deepEqual(JSON.parse(calls[0].stdin), { version: 1, query: 'current prompt', budget: 512 });
    assert.deepEqual(calls[0].args, [...flags, 'invoke', 'context']);
  }
});

test('2: no evidence, bad output, a failing command or oversized text give undefined', async () => {
  const bad = [
    fakeSbuf({ stdout: envelope({ ...contextResult(), blocks: [] }) }),
    fakeSbuf({ stdout: 'not json' }),
    fakeSbuf({ exitCode: 3 }),
    fakeSbuf({ stdout: envelope(contextResult({ text: 'x'.repeat(40000) })) }),
  ];
  for (const scope of Object.keys(FLAGS)) {
    for (const sbuf of bad) {
      const lifecycle = createLifecycle(fakePi(), { scope, command: sbuf.bin, env: NO_SCOPE });
      assert.equal(await lifecycle.beforeAgentStart({ prompt: 'current prompt' }, { cwd: tempDir() }), undefined);
    }
  }
});

test('3: settling twice sends one capture review as a triggered follow-up', async () => {
  const pi = fakePi();
  const lifecycle = createLifecycle(pi, { scope: 'global', retrieveContext: async () => envelope() });
  await lifecycle.beforeAgentStart({ prompt: 'current prompt' }, {});
  lifecycle.agentSettled();
  lifecycle.agentSettled();
  assert.equal(pi.sent.length, 1);
  assert.equal(pi.sent[0].message.customType, 'stormbuffer-capture-review');
  assert.equal(pi.sent[0].message.display, false);
  assert.match(pi.sent[0].message.content, /Submit nothing for routine completion/);
  assert.deepEqual(pi.sent[0].options, { triggerTurn: true, deliverAs: 'followUp' });
});

test('4: a local scope option names the selected local scope', () => {
  const pi = fakePi();
  createLifecycle(pi, { scope: 'local' }).agentSettled();
  assert.match(pi.sent[0].message.content, /selected local scope/);
});

test('5: an initialized .sbuf above the ctx cwd selects the project scope', async () => {
  const { nested } = projectTree();
  const sbuf = fakeSbuf();
  const pi = fakePi();
  const lifecycle = createLifecycle(pi, { command: sbuf.bin, env: NO_SCOPE });
  await lifecycle.beforeAgentStart({ prompt: 'current prompt' }, { cwd: nested });
  assert.deepEqual(sbuf.calls()[0].args, ['--project', 'invoke', 'context']);
  lifecycle.agentSettled();
  assert.match(pi.sent[0].message.content, /selected project scope/);
});

test('6: a capture-review prompt neither recalls nor asks again', async () => {
  const sbuf = fakeSbuf();
  const pi = fakePi();
  const lifecycle = createLifecycle(pi, { scope: 'global', command: sbuf.bin, env: NO_SCOPE });
  assert.equal(await lifecycle.beforeAgentStart({ prompt: `${CAPTURE_MARKER}\nreview` }, {}), undefined);
  lifecycle.agentSettled();
  assert.deepEqual(sbuf.calls(), []);
  assert.deepEqual(pi.sent, []);
});

test('7: a throwing retriever and an event without a prompt give undefined', async () => {
  const throwing = createLifecycle(fakePi(), {
    scope: 'global',
    retrieveContext: () => {
      throw new Error('boom');
    },
  });
  assert.equal(await throwing.beforeAgentStart({ prompt: 'current prompt' }, {}), undefined);
  const sbuf = fakeSbuf();
  const lifecycle = createLifecycle(fakePi(), { scope: 'global', command: sbuf.bin, env: NO_SCOPE });
  assert.equal(await lifecycle.beforeAgentStart({}, {}), undefined);
  assert.equal(await lifecycle.beforeAgentStart(undefined, undefined), undefined);
  assert.deepEqual(sbuf.calls(), []);
});

test('the default export registers the prompt and settle handlers; a busy agent gets the review when idle', async () => {
  const pi = fakePi();
  stormbuffer(pi, { scope: 'global', retrieveContext: async () => envelope() });
  assert.deepEqual(Object.keys(pi.handlers).sort(), ['agent_end', 'agent_settled', 'before_agent_start']);
  await pi.handlers.before_agent_start({ prompt: 'current prompt' }, {});
  let idle = false;
  pi.handlers.agent_end({}, { isIdle: () => idle });
  pi.handlers.agent_settled({}, { isIdle: () => idle });
  assert.equal(pi.sent.length, 0);
  idle = true;
  await new Promise((resolve) => setTimeout(resolve, 50));
  assert.equal(pi.sent.length, 1);
});
