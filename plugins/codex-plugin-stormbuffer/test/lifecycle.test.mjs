import assert from 'node:assert/strict';
import { chmodSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

import codexHooks from '../hooks/codex.cjs';
import {
  CAPTURE_MARKER,
  MAX_CONTEXT_CHARS,
  contextInvocation,
  mcpCommand,
  parseContextEnvelope,
  recall,
  renderContext,
  runInvocation,
  selectScope,
  teamServer,
} from '../hooks/lifecycle.cjs';
import { contextResult, envelope, fakeSbuf, projectTree, runHookProcess, tempDir } from './fixtures.mjs';

const { candidateWritten, consumeCandidate, markCandidate, markerPath, stopHook } = codexHooks;

const HOOK = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'hooks', 'codex.cjs');
const NO_SCOPE = {};

/** Whether `pid` is alive (an unreaped zombie counts as gone). */
function running(pid) {
  try {
    return !readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].startsWith('Z');
  } catch {
    return false;
  }
}

const runHook = (name, event, env) => runHookProcess(HOOK, name, event, env);

test('1: the nearest initialized project store selects project; an explicit scope wins', () => {
  const { nested } = projectTree();
  assert.equal(selectScope({ env: NO_SCOPE, cwd: nested }), 'project');
  assert.equal(selectScope({ env: { STORMBUFFER_SCOPE: 'global' }, cwd: nested }), 'global');
  assert.equal(selectScope({ env: NO_SCOPE, cwd: tempDir() }), 'global');
  assert.equal(selectScope({ env: NO_SCOPE, cwd: '' }), 'global');
  assert.equal(selectScope({ env: NO_SCOPE, cwd: 42 }), 'global');
  const invocation = contextInvocation('current prompt', { scope: selectScope({ env: NO_SCOPE, cwd: nested }) });
  assert.deepEqual(invocation.args, ['--project', 'invoke', 'context']);
  const stop = stopHook({ cwd: nested, session_id: 's', turn_id: 'project-stop' }, { env: NO_SCOPE });
  assert.match(stop.reason, /selected project scope/);
});

test('2: an uninitialized nearer .sbuf hides an initialized parent store', () => {
  const { root } = projectTree();
  const inner = path.join(root, 'src');
  mkdirSync(path.join(inner, '.sbuf'));
  assert.equal(selectScope({ env: NO_SCOPE, cwd: path.join(inner, 'deep') }), 'global');
});

test('3: each scope yields its flag and the exact stdin', () => {
  const expected = { global: [], project: ['--project'], local: ['--local'] };
  for (const [scope, flags] of Object.entries(expected)) {
    const invocation = contextInvocation('current prompt', { scope, budget: 64, env: NO_SCOPE });
    assert.equal(invocation.command, 'sbuf');
    assert.deepEqual(invocation.args, [...flags, 'invoke', 'context']);
    assert.equal(invocation.input, '{"version":1,"query":"current prompt","budget":64}\n');
    assert.deepEqual(JSON.parse(invocation.input), { version: 1, query: 'current prompt', budget: 64 });
  }
  assert.equal(contextInvocation('q', { env: { STORMBUFFER_BIN: '/opt/sbuf' } }).command, '/opt/sbuf');
  assert.equal(JSON.parse(contextInvocation('q', { budget: 99999, env: NO_SCOPE }).input).budget, 4096);
  assert.equal(JSON.parse(contextInvocation('q', { budget: -1, env: NO_SCOPE }).input).budget, 512);
  assert.equal(contextInvocation('x'.repeat(2049), { env: NO_SCOPE }), null);
  assert.equal(contextInvocation('', { env: NO_SCOPE }), null);
});

test('4: the rendered context is bounded untrusted evidence with the receipt and record ids', () => {
  const rendered = renderContext(parseContextEnvelope(envelope()));
  assert.match(rendered, /untrusted evidence/);
  assert.ok(rendered.includes('receipt-1'));
  assert.ok(rendered.includes('record-1'));
  assert.ok(rendered.length <= MAX_CONTEXT_CHARS);
  assert.ok(rendered.endsWith(JSON.stringify(contextResult())));
  assert.equal(renderContext(parseContextEnvelope(envelope(contextResult({ text: 'x'.repeat(32768) })))), null);
});

test('5: anything but a well-formed successful context envelope fails open', () => {
  const result = contextResult();
  const variants = [
    'not json',
    JSON.stringify({ version: 1, ok: false }),
    envelope({ ...result, blocks: [] }),
    envelope({ ...result, receipt: {} }),
    envelope({ ...result, contract: { version: 'stormbuffer-context-v1', record_text_rule: 'r' } }),
    envelope({ ...result, contract: { version: 'stormbuffer-context-v1', boundaries: [{}] } }),
    envelope({ ...result, blocks: [{ record_id: 'record-1' }] }),
    JSON.stringify({ ok: true, operation: 'search', result, version: 1 }),
    '',
  ];
  for (const stdout of variants) assert.equal(parseContextEnvelope(stdout), null, stdout.slice(0, 80));
  assert.notEqual(parseContextEnvelope(envelope()), null);
});

test('6: stop asks once for a capture review, unless a candidate was written or the hook is active', () => {
  const event = { cwd: tempDir(), session_id: 'session-6', turn_id: 'turn-6' };
  const stop = stopHook(event, { env: NO_SCOPE });
  assert.equal(stop.decision, 'block');
  assert.ok(stop.reason.startsWith(CAPTURE_MARKER));
  assert.match(stop.reason, /Submit nothing for routine completion/);
  assert.match(stop.reason, /only when that server uses the selected scope/);
  assert.match(stop.reason, /Use the global Stormbuffer scope\./);
  assert.match(stopHook(event, { env: NO_SCOPE, scope: 'project' }).reason, /selected project scope/);
  markCandidate(event);
  assert.deepEqual(stopHook(event, { env: NO_SCOPE }), {});
  assert.deepEqual(stopHook({ ...event, stop_hook_active: true }, { env: NO_SCOPE }), {});
  assert.deepEqual(stopHook(null), {});
  assert.equal(contextInvocation(`please ${CAPTURE_MARKER} review`, { env: NO_SCOPE }), null);
});

test('7: a memory_update answer in structuredContent is recognized', () => {
  const event = {
    tool_name: 'mcp__stormbuffer__memory_update',
    tool_response: { structuredContent: { ok: true, operation: 'update' } },
  };
  assert.equal(candidateWritten(event), 'update');
  const text = { tool_name: 'mcp__stormbuffer__memory_remember',
    tool_response: { content: [{ type: 'text', text: 'note\n{"ok":true,"operation":"remember"}' }] } };
  assert.equal(candidateWritten(text), 'remember');
});

test('8: the candidate marker belongs to one session and turn', () => {
  const event = { session_id: 'session-8', turn_id: 'turn-8' };
  assert.equal(markCandidate(event), true);
  const marker = markerPath(event);
  assert.equal(statSync(marker).mode & 0o777, 0o600);
  assert.equal(statSync(path.dirname(marker)).mode & 0o777, 0o700);
  assert.equal(consumeCandidate({ ...event, turn_id: 'turn-other' }), false);
  assert.equal(consumeCandidate(event), true);
  assert.equal(consumeCandidate(event), false);
  assert.equal(markCandidate({ session_id: 'session-8' }), false);
});

test('9: other tools, reads and failed writes are not candidates', () => {
  const ok = { ok: true, operation: 'remember' };
  assert.equal(candidateWritten({ tool_name: 'Bash', tool_response: { stdout: JSON.stringify(ok) } }), null);
  assert.equal(candidateWritten({ tool_name: 'mcp__stormbuffer__memory_recall',
    tool_response: { structuredContent: { ok: true, operation: 'context' } } }), null);
  assert.equal(candidateWritten({ tool_name: 'mcp__stormbuffer__memory_remember',
    tool_response: { isError: true, structuredContent: { ok: false, operation: 'remember' } } }), null);
  assert.equal(candidateWritten({ tool_name: 'mcp__stormbuffer__memory_remember',
    tool_response: { structuredContent: { ok: true, operation: 'update' } } }), null);
});

test('10: the stop hook process consumes a marker once', () => {
  const event = { cwd: tempDir(), session_id: 'session-10', turn_id: 'turn-10' };
  markCandidate(event);
  assert.deepEqual(runHook('stop', event, { STORMBUFFER_SCOPE: '' }), {});
  assert.equal(runHook('stop', event, { STORMBUFFER_SCOPE: '' }).decision, 'block');
});

test('11: a slow sbuf is killed with its process group after the timeout', async () => {
  const pidFile = path.join(tempDir(), 'children');
  const sbuf = path.join(tempDir(), 'sbuf');
  writeFileSync(sbuf, `#!/bin/sh\nsleep 10 &\nsleep 10 &\necho $! > ${pidFile}.tmp && mv ${pidFile}.tmp ${pidFile}\nwait\n`);
  chmodSync(sbuf, 0o755);
  const started = Date.now();
  const result = await runInvocation({ command: sbuf, args: [], input: '{}\n' }, { timeoutMs: 50 });
  assert.equal(result, null);
  assert.ok(Date.now() - started < 1000);
  const pid = Number(readFileSync(pidFile, 'utf8'));
  await new Promise((resolve) => setTimeout(resolve, 100));
  assert.ok(!running(pid), `child ${pid} survived`);
});

test('12: the prompt hook process returns the context for every scope; a missing sbuf gives {}', () => {
  const sbuf = fakeSbuf();
  for (const scope of ['global', 'project', 'local']) {
    const output = runHook('prompt', { prompt: 'current prompt', cwd: tempDir() },
      { STORMBUFFER_BIN: sbuf.bin, STORMBUFFER_SCOPE: scope });
    assert.equal(output.hookSpecificOutput.hookEventName, 'UserPromptSubmit');
    assert.ok(output.hookSpecificOutput.additionalContext.includes('receipt-1'));
  }
  assert.deepEqual(sbuf.calls().map((call) => call.args), [
    ['invoke', 'context'], ['--project', 'invoke', 'context'], ['--local', 'invoke', 'context'],
  ]);
  assert.equal(sbuf.calls()[0].stdin, '{"version":1,"query":"current prompt","budget":512}\n');
  const missing = path.join(tempDir(), 'no-such-sbuf');
  assert.deepEqual(runHook('prompt', { prompt: 'current prompt' }, { STORMBUFFER_BIN: missing }), {});
});

test('13: malformed, empty and oversized events give {}', () => {
  const sbuf = fakeSbuf();
  const env = { STORMBUFFER_BIN: sbuf.bin, STORMBUFFER_SCOPE: 'global' };
  assert.deepEqual(runHook('prompt', '{not json', env), {});
  assert.deepEqual(runHook('prompt', {}, env), {});
  assert.deepEqual(runHook('prompt', { prompt: 'x'.repeat(70000) }, env), {});
  assert.deepEqual(runHook('stop', '[1,2]', env), {});
  assert.deepEqual(runHook('unknown', {}, env), {});
  assert.deepEqual(sbuf.calls(), []);
});

test('recall renders a successful answer and fails open on a failing sbuf', async () => {
  const sbuf = fakeSbuf();
  const rendered = await recall('current prompt', { command: sbuf.bin, scope: 'local', env: NO_SCOPE });
  assert.ok(rendered.includes('receipt-1'));
  const failing = fakeSbuf({ exitCode: 1 });
  assert.equal(await recall('current prompt', { command: failing.bin, env: NO_SCOPE }), null);
});

test('a team server is used only over https, or plain http to loopback, and only with a token', () => {
  const token = { STORMBUFFER_TOKEN: 'sbt_x' };
  assert.equal(teamServer({}), null);
  assert.equal(teamServer({ STORMBUFFER_URL: '  ', ...token }), null);
  assert.deepEqual(teamServer({ STORMBUFFER_URL: 'https://team.example:7342/', ...token }),
    { usable: true, base: 'https://team.example:7342', token: 'sbt_x' });
  for (const url of ['http://127.0.0.1:7342', 'http://localhost:7342', 'http://[::1]:7342']) {
    assert.equal(teamServer({ STORMBUFFER_URL: url, ...token }).usable, true, url);
  }
  for (const url of ['http://team.example:7342', 'ftp://127.0.0.1', 'not an address']) {
    assert.equal(teamServer({ STORMBUFFER_URL: url, ...token }).usable, false, url);
  }
  assert.equal(teamServer({ STORMBUFFER_URL: 'https://team.example' }).usable, false);
  assert.equal(teamServer({ STORMBUFFER_URL: 'https://team.example', STORMBUFFER_TOKEN: 'a\nb' }).usable, false);
  const env = { STORMBUFFER_URL: 'https://team.example', ...token, STORMBUFFER_SCOPE: 'project' };
  assert.equal(selectScope({ env, cwd: projectTree().nested }), 'team');
  assert.deepEqual(mcpCommand('team', env), ['stormbuffer-mcp', '--remote', 'https://team.example/mcp']);
  assert.deepEqual(mcpCommand('project', { STORMBUFFER_BIN: '/x/sbuf' }),
    ['/x/sbuf', '--project', 'mcp', '--stdio', '--allow-candidate-writes']);
});
