'use strict';
// The command-hook protocol that Codex, Claude Code and Gemini CLI share: each hook is a process
// that reads one JSON event on stdin and prints one JSON line. The prompt hook (`UserPromptSubmit`,
// Gemini's `BeforeAgent`) recalls into `additionalContext`; a successful Stormbuffer
// `memory_remember`/`memory_update` (`PostToolUse`, `AfterTool`) leaves a per-turn marker file; the
// stop hook (`Stop`, `AfterAgent`) consumes the marker, or without one blocks the stop once with the
// capture instruction as its reason. Each host adapter only names its prompt event, its candidate
// tools and how its events identify a turn.
const { closeSync, mkdirSync, openSync, readSync, readdirSync, unlinkSync, writeSync } = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const { DEFAULT_TIMEOUT_MS, captureInstruction, recall, selectScope } = require('./lifecycle.cjs');

const MAX_EVENT_BYTES = 64 * 1024;
const RECALL_TIMEOUT_MS = DEFAULT_TIMEOUT_MS;

// Where tool results nest an envelope (`text` for MCP text content blocks, `llmContent` and
// `returnDisplay` for Gemini CLI's tool results).
const NESTED_KEYS = ['structuredContent', 'structured_content', 'output', 'stdout', 'content', 'text', 'llmContent',
  'returnDisplay'];

const isObject = (value) => typeof value === 'object' && value !== null && !Array.isArray(value);
const isText = (value) => typeof value === 'string' && value !== '';

/** The hook event in `raw`: an object, or null (too large, not JSON, not an object). */
function parseEvent(raw) {
  if (typeof raw !== 'string' || Buffer.byteLength(raw) > MAX_EVENT_BYTES) return null;
  try {
    const event = JSON.parse(raw);
    return isObject(event) ? event : null;
  } catch {
    return null;
  }
}

function parsed(text) {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** Whether `value` holds a successful `operation` envelope anywhere a tool result may put it. */
function containsSuccess(value, operation, depth = 0) {
  if (depth > 8) return false;
  if (Array.isArray(value)) return value.some((item) => containsSuccess(item, operation, depth + 1));
  if (typeof value === 'string') {
    const whole = parsed(value);
    if (whole !== undefined && typeof whole !== 'string' && containsSuccess(whole, operation, depth + 1)) return true;
    return value.split('\n').some((line) => {
      const item = line.trim() === '' ? undefined : parsed(line);
      return item !== undefined && typeof item !== 'string' && containsSuccess(item, operation, depth + 1);
    });
  }
  if (!isObject(value)) return false;
  if (value.ok === true && value.operation === operation) return true;
  return NESTED_KEYS.some((key) => key in value && containsSuccess(value[key], operation, depth + 1));
}

/**
 * The hooks of one host. `promptEvent` names the prompt hook's event; `candidateTool` matches the
 * host's names for the Stormbuffer `memory_remember`/`memory_update` tools (group 1: the
 * operation); `turnOf(event)` is the turn id (null: none); markers live in
 * `<tmpdir>/stormbuffer-<host>-<uid>/`.
 */
function createCommandHooks({
  host,
  promptEvent = 'UserPromptSubmit',
  candidateTool,
  turnOf = (event) => event.turn_id,
}) {
  /** The operation (`remember`/`update`) a successful candidate tool call performed, or null. */
  function candidateWritten(event) {
    if (!isObject(event) || typeof event.tool_name !== 'string') return null;
    const match = candidateTool.exec(event.tool_name);
    if (match === null) return null;
    return containsSuccess(event.tool_response, match[1]) ? match[1] : null;
  }

  /** The directory of this host's markers. */
  function markerDirectory({ tmpdir = os.tmpdir() } = {}) {
    const uid = typeof process.getuid === 'function' ? process.getuid() : 'user';
    return path.join(tmpdir, `stormbuffer-${host}-${uid}`);
  }

  /** The per-turn marker file, or null without a session and turn id. */
  function markerPath(event, options) {
    if (!isObject(event)) return null;
    const session = event.session_id;
    const turn = turnOf(event);
    if (!isText(session) || !isText(turn)) return null;
    // Loaded only here: `node:crypto` costs a prompt hook several milliseconds at start.
    const { createHash } = require('node:crypto');
    const name = createHash('sha256').update(`${session}\0${turn}`).digest('hex');
    return path.join(markerDirectory(options), `${name}.candidate`);
  }

  /** Record that this turn already wrote a candidate. */
  function markCandidate(event, options) {
    const marker = markerPath(event, options);
    if (marker === null) return false;
    mkdirSync(path.dirname(marker), { recursive: true, mode: 0o700 });
    closeSync(openSync(marker, 'w', 0o600));
    return true;
  }

  /** Remove this turn's marker; whether there was one. */
  function consumeCandidate(event, options) {
    if (!hasMarkers(markerDirectory(options))) return false;
    const marker = markerPath(event, options);
    if (marker === null) return false;
    try {
      unlinkSync(marker);
      return true;
    } catch {
      return false;
    }
  }

  /** A new prompt starts a turn: drop a marker left from an earlier one, then recall. */
  async function promptHook(event, { timeoutMs = RECALL_TIMEOUT_MS, env = process.env, ...options } = {}) {
    if (!isObject(event)) return {};
    consumeCandidate(event, options);
    const cwd = typeof event.cwd === 'string' ? event.cwd : undefined;
    const context = await recall(event.prompt, { scope: selectScope({ env, cwd }), env, cwd, timeoutMs });
    return context === null ? {} : { hookSpecificOutput: { hookEventName: promptEvent, additionalContext: context } };
  }

  function postToolHook(event, options) {
    if (candidateWritten(event) !== null) markCandidate(event, options);
    return {};
  }

  function stopHook(event, { env = process.env, scope, ...options } = {}) {
    if (!isObject(event) || event.stop_hook_active === true) return {};
    if (consumeCandidate(event, options)) return {};
    const cwd = typeof event.cwd === 'string' ? event.cwd : undefined;
    return { decision: 'block', reason: captureInstruction(scope ?? selectScope({ env, cwd })) };
  }

  const hooks = { prompt: promptHook, 'post-tool': postToolHook, stop: stopHook };

  /** Run hook `name` on the event on stdin; print exactly one JSON line, never throw. */
  async function main(name) {
    let output = {};
    try {
      const hook = hooks[name];
      if (hook !== undefined) output = (await hook(parseEvent(await readStdin()))) ?? {};
    } catch {
      output = {};
    }
    writeStdout(`${JSON.stringify(output)}\n`);
  }

  return { candidateWritten, markerPath, markCandidate, consumeCandidate, promptHook, postToolHook, stopHook, main };
}

/**
 * A host's hook entry module: `entry.exports` get the host's hooks and its CANDIDATE_TOOL, and when
 * `entry` is the script Node.js runs, it runs hook `argv[2]` on stdin and exits 0.
 */
function hostEntry(entry, options) {
  const hooks = createCommandHooks(options);
  Object.assign(entry.exports, { CANDIDATE_TOOL: options.candidateTool }, hooks);
  if (require.main === entry) hooks.main(process.argv[2]).then(() => process.exit(0));
}

/** Whether `directory` holds any marker (no `node:crypto` needed to know there is none). */
function hasMarkers(directory) {
  try {
    return readdirSync(directory).length > 0;
  } catch {
    return false;
  }
}

/**
 * The event on stdin, at most MAX_EVENT_BYTES (null past that). Read synchronously, which spares a
 * hook process the stream machinery of `process.stdin`; a stdin that would block (non-blocking
 * descriptors) is read as a stream instead.
 */
async function readStdin() {
  const chunks = [];
  let size = 0;
  try {
    const chunk = Buffer.alloc(MAX_EVENT_BYTES + 1);
    for (;;) {
      const count = readSync(0, chunk, 0, chunk.length, null);
      if (count === 0) break;
      size += count;
      if (size > MAX_EVENT_BYTES) return null;
      chunks.push(Buffer.from(chunk.subarray(0, count)));
    }
  } catch (error) {
    if (error?.code !== 'EAGAIN') throw error;
    for await (const chunk of process.stdin) {
      size += chunk.length;
      if (size > MAX_EVENT_BYTES) return null;
      chunks.push(chunk);
    }
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** Write `text` to stdout synchronously (through the stream when stdout would block). */
function writeStdout(text) {
  const data = Buffer.from(text, 'utf8');
  let written = 0;
  try {
    while (written < data.length) written += writeSync(1, data, written);
  } catch (error) {
    if (error?.code !== 'EAGAIN') throw error;
    process.stdout.write(data.subarray(written));
  }
}

module.exports = {
  MAX_EVENT_BYTES,
  RECALL_TIMEOUT_MS,
  parseEvent,
  containsSuccess,
  createCommandHooks,
  hostEntry,
};
