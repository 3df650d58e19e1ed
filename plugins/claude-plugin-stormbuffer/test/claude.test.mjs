import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { fakeSbuf, runHookProcess, tempDir } from '../../codex-plugin-stormbuffer/test/fixtures.mjs';
import hooks from '../hooks/claude.cjs';

const { CANDIDATE_TOOL, candidateWritten, markCandidate, markerPath } = hooks;

const ROOT = path.join(path.dirname(fileURLToPath(import.meta.url)), '..');
const HOOK = path.join(ROOT, 'hooks', 'claude.cjs');
const written = JSON.stringify({ ok: true, operation: 'remember', version: 1, result: { record_id: 'r-1' } });

const runHook = (name, event, env) => runHookProcess(HOOK, name, event, env);

test('the plugin MCP tools and a hand-registered server are recognized; other tools are not', () => {
  const response = [{ type: 'text', text: written }];
  for (const name of ['mcp__plugin_stormbuffer_stormbuffer__memory_remember', 'mcp__stormbuffer__memory_remember']) {
    assert.equal(candidateWritten({ tool_name: name, tool_response: response }), 'remember');
  }
  assert.equal(candidateWritten({ tool_name: 'mcp__plugin_other_stormbuffer__memory_remember', tool_response: response }), null);
  assert.equal(candidateWritten({ tool_name: 'mcp__plugin_stormbuffer_stormbuffer__memory_recall', tool_response: response }), null);
  assert.equal(candidateWritten({ tool_name: 'Bash', tool_response: { stdout: written } }), null);
});

test('hooks.json runs claude.cjs for the prompt, the candidate tools and the stop, within 10 s', () => {
  const { hooks } = JSON.parse(readFileSync(path.join(ROOT, 'hooks', 'hooks.json'), 'utf8'));
  assert.deepEqual(Object.keys(hooks).sort(), ['PostToolUse', 'Stop', 'UserPromptSubmit']);
  const commands = Object.values(hooks).flatMap((groups) => groups.flatMap((group) => group.hooks));
  for (const hook of commands) {
    assert.match(hook.command, /^node "\$\{CLAUDE_PLUGIN_ROOT\}\/hooks\/claude\.cjs" (prompt|post-tool|stop)$/);
    assert.equal(hook.timeout, 10);
  }
  const matcher = new RegExp(hooks.PostToolUse[0].matcher);
  for (const operation of ['remember', 'update']) {
    const tool = `mcp__plugin_stormbuffer_stormbuffer__memory_${operation}`;
    assert.ok(matcher.test(tool) && CANDIDATE_TOOL.test(tool));
  }
  const mcp = JSON.parse(readFileSync(path.join(ROOT, '.mcp.json'), 'utf8')).mcpServers.stormbuffer;
  assert.deepEqual(mcp, { command: 'node', args: ['${CLAUDE_PLUGIN_ROOT}/hooks/mcp.mjs'] });
});

test('the marker is per session (Claude Code has no turn id) and a new prompt clears it', () => {
  const event = { cwd: tempDir(), session_id: `session-${process.pid}-clear` };
  assert.ok(markerPath(event).includes(`stormbuffer-claude-`));
  markCandidate(event);
  const missing = path.join(tempDir(), 'no-such-sbuf');
  assert.deepEqual(runHook('prompt', { ...event, prompt: 'next prompt' }, { STORMBUFFER_BIN: missing }), {});
  assert.equal(runHook('stop', event, { STORMBUFFER_SCOPE: '' }).decision, 'block');
});

test('a candidate written in the turn lets the stop pass once; an active stop always passes', () => {
  const event = { cwd: tempDir(), session_id: `session-${process.pid}-stop` };
  const tool = { ...event, tool_name: 'mcp__plugin_stormbuffer_stormbuffer__memory_remember',
    tool_response: [{ type: 'text', text: written }] };
  assert.deepEqual(runHook('post-tool', tool), {});
  assert.deepEqual(runHook('stop', event, { STORMBUFFER_SCOPE: '' }), {});
  const stop = runHook('stop', event, { STORMBUFFER_SCOPE: 'local' });
  assert.equal(stop.decision, 'block');
  assert.ok(stop.reason.startsWith('[stormbuffer:capture-review]\n'));
  assert.match(stop.reason, /selected local scope/);
  assert.match(stop.reason, /Submit nothing for routine completion/);
  assert.deepEqual(runHook('stop', { ...event, stop_hook_active: true }), {});
});

test('the prompt hook hands the evidence to Claude Code as additional context; bad events give {}', () => {
  const sbuf = fakeSbuf();
  const env = { STORMBUFFER_BIN: sbuf.bin, STORMBUFFER_SCOPE: 'project' };
  const output = runHook('prompt', { prompt: 'current prompt', cwd: tempDir(), session_id: 's' }, env);
  assert.equal(output.hookSpecificOutput.hookEventName, 'UserPromptSubmit');
  assert.match(output.hookSpecificOutput.additionalContext, /^The following is untrusted evidence from Stormbuffer/);
  assert.ok(output.hookSpecificOutput.additionalContext.includes('receipt-1'));
  assert.deepEqual(sbuf.calls().map((call) => call.args), [['--project', 'invoke', 'context']]);
  assert.deepEqual(runHook('prompt', '{not json', env), {});
  assert.deepEqual(runHook('prompt', { prompt: '[stormbuffer:capture-review] again' }, env), {});
  assert.equal(sbuf.calls().length, 1);
});
