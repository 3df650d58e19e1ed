// OpenCode plugin: recall Stormbuffer memory for each user message into the system prompt of that
// turn, and when the session goes idle ask the agent once to review the turn for one candidate.
// It also registers the Stormbuffer MCP server (with candidate writes) unless the configuration
// already names one. Every failure leaves the turn as it was (fail open).
import { containsSuccess } from './command-hooks.cjs';
import { CAPTURE_MARKER, DEFAULT_TIMEOUT_MS, captureInstruction, mcpCommand, recall, retrieveContext, selectScope } from './lifecycle.cjs';

// OpenCode names MCP tools `<server>_<tool>`.
export const CANDIDATE_TOOL = /^stormbuffer_memory_(remember|update)$/;

function promptOf(parts) {
  if (!Array.isArray(parts)) return '';
  return parts
    .filter((part) => part?.type === 'text' && typeof part.text === 'string' && part.synthetic !== true)
    .map((part) => part.text)
    .join('\n');
}

/**
 * The plugin's handlers for one OpenCode instance. `options` may fix `scope`, `env`, `timeoutMs`
 * or replace `retrieveContext(invocation, {timeoutMs, cwd})` (default: ask the warm daemon, else run `sbuf`).
 */
export function createLifecycle({ client, directory }, options = {}) {
  const env = options.env ?? process.env;
  const sessions = new Map();
  let latest = null;
  const scopeNow = () => options.scope ?? selectScope({ env, cwd: directory });
  const session = (id) => {
    if (!sessions.has(id)) sessions.set(id, { context: null, scope: scopeNow(), reviewed: true });
    return sessions.get(id);
  };

  async function chatMessage(input, output) {
    try {
      const turn = session(input?.sessionID);
      const prompt = promptOf(output?.parts);
      const capture = prompt.includes(CAPTURE_MARKER);
      Object.assign(turn, { context: null, scope: scopeNow(), reviewed: capture });
      latest = turn;
      if (capture) return;
      turn.context = await recall(prompt, {
        scope: turn.scope,
        env,
        cwd: directory,
        timeoutMs: options.timeoutMs ?? DEFAULT_TIMEOUT_MS,
        retrieve: options.retrieveContext ?? retrieveContext,
      });
    } catch {
      // fail open
    }
  }

  async function systemTransform(input, output) {
    const turn = input?.sessionID !== undefined ? sessions.get(input.sessionID) : latest;
    if (turn?.context && Array.isArray(output?.system)) output.system.push(turn.context);
  }

  async function toolAfter(input, output) {
    const match = typeof input?.tool === 'string' ? CANDIDATE_TOOL.exec(input.tool) : null;
    if (match !== null && sessions.has(input.sessionID) && containsSuccess(output, match[1])) {
      sessions.get(input.sessionID).reviewed = true;
    }
  }

  async function event({ event: happened } = {}) {
    if (happened?.type !== 'session.idle') return;
    const turn = sessions.get(happened.properties?.sessionID);
    if (turn === undefined || turn.reviewed) return;
    turn.reviewed = true;
    const text = captureInstruction(turn.scope);
    try {
      const request = { path: { id: happened.properties.sessionID }, body: { parts: [{ type: 'text', text }] } };
      Promise.resolve(client.session.prompt(request)).catch(() => {});
    } catch {
      // fail open
    }
  }

  async function config(settings) {
    if (typeof settings !== 'object' || settings === null) return;
    settings.mcp ??= {};
    settings.mcp.stormbuffer ??= {
      type: 'local',
      command: mcpCommand(scopeNow(), env),
      enabled: true,
    };
  }

  return { chatMessage, systemTransform, toolAfter, event, config };
}

export const StormbufferPlugin = async (input) => {
  const lifecycle = createLifecycle(input);
  return {
    config: lifecycle.config,
    'chat.message': lifecycle.chatMessage,
    'experimental.chat.system.transform': lifecycle.systemTransform,
    'tool.execute.after': lifecycle.toolAfter,
    event: lifecycle.event,
  };
};
