import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { fakeSbuf, runHookProcess, tempDir } from '../../codex-plugin-stormbuffer/test/fixtures.mjs';
import hooks from '../hooks/gemini.cjs';

const { CANDIDATE_TOOL, candidateWritten, markerPath } = hooks;

const ROOT = path.join(path.dirname(fileURLToPath(import.meta.url)), '..');
const HOOK = path.join(ROOT, 'hooks', 'gemini.cjs');
const written = JSON.stringify({ ok: true, operation: 'update', version: 1, result: { record_id: 'r-1' } });

const runHook = (name, event, env) => runHookProcess(HOOK, name, event, env);

test("Gemini CLI's tool result (llmContent parts) from the stormbuffer server is recognized", () => {
  const response = { llmContent: [{ text: `<untrusted_context>\n${written}\n</untrusted_context>` }], returnDisplay: '' };
  assert.equal(candidateWritten({ tool_name: 'mcp_stormbuffer_memory_update', tool_response: response }), 'update');
  assert.equal(candidateWritten({ tool_name: 'mcp_stormbuffer_memory_remember', tool_response: response }), null);
  assert.equal(candidateWritten({ tool_name: 'mcp_other_memory_update', tool_response: response }), null);
  assert.equal(candidateWritten({ tool_name: 'run_shell_command', tool_response: { llmContent: written } }), null);
});

test('the manifest registers the MCP server and the context file; hooks.json runs gemini.cjs within 10 s', () => {
  const manifest = JSON.parse(readFileSync(path.join(ROOT, 'gemini-extension.json'), 'utf8'));
  assert.equal(manifest.name, 'stormbuffer');
  assert.deepEqual(manifest.mcpServers.stormbuffer, { command: 'node', args: ['${extensionPath}/hooks/mcp.mjs'] });
  const context = readFileSync(path.join(ROOT, manifest.contextFileName), 'utf8');
  assert.ok(!context.includes('[stormbuffer:capture-review]'), 'the context file never carries the marker');
  const { hooks } = JSON.parse(readFileSync(path.join(ROOT, 'hooks', 'hooks.json'), 'utf8'));
  assert.deepEqual(Object.keys(hooks).sort(), ['AfterAgent', 'AfterTool', 'BeforeAgent']);
  for (const hook of Object.values(hooks).flatMap((groups) => groups.flatMap((group) => group.hooks))) {
    assert.match(hook.command, /^node "\$\{extensionPath\}\/hooks\/gemini\.cjs" (prompt|post-tool|stop)$/);
    assert.equal(hook.timeout, 10000);
  }
  const matcher = new RegExp(hooks.AfterTool[0].matcher);
  for (const tool of ['mcp_stormbuffer_memory_remember', 'mcp_stormbuffer_memory_update']) {
    assert.ok(matcher.test(tool) && CANDIDATE_TOOL.test(tool));
  }
});

test('BeforeAgent gets the evidence as additional context; AfterAgent asks for the review once', () => {
  const sbuf = fakeSbuf();
  const event = { cwd: tempDir(), session_id: `session-${process.pid}-gemini` };
  const env = { STORMBUFFER_BIN: sbuf.bin, STORMBUFFER_SCOPE: 'global' };
  const output = runHook('prompt', { ...event, hook_event_name: 'BeforeAgent', prompt: 'current prompt' }, env);
  assert.equal(output.hookSpecificOutput.hookEventName, 'BeforeAgent');
  assert.ok(output.hookSpecificOutput.additionalContext.includes('receipt-1'));
  assert.ok(markerPath(event).includes('stormbuffer-gemini-'));
  const stop = runHook('stop', { ...event, prompt_response: 'done' }, env);
  assert.equal(stop.decision, 'block');
  assert.match(stop.reason, /Use the global Stormbuffer scope\./);
  assert.deepEqual(runHook('stop', { ...event, stop_hook_active: true }, env), {});
  const tool = { ...event, tool_name: 'mcp_stormbuffer_memory_update', tool_response: { llmContent: written } };
  assert.deepEqual(runHook('post-tool', tool, env), {});
  assert.deepEqual(runHook('stop', event, env), {});
});
