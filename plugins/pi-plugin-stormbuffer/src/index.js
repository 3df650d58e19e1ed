// Pi extension: before the agent starts on a prompt, recall Stormbuffer memory into one hidden
// context message; when the agent has finished, ask it once to review the turn for one candidate.
import {
  CAPTURE_CUSTOM_TYPE,
  CAPTURE_MARKER,
  CONTEXT_CUSTOM_TYPE,
  DEFAULT_BUDGET,
  DEFAULT_TIMEOUT_MS,
  captureInstruction,
  recall,
  retrieveContext,
  selectScope,
} from 'codex-plugin-stormbuffer';

// Pi 0.73 ends a prompt with `agent_end`, emitted while the agent still counts as streaming;
// later releases add `agent_settled`. Both are registered; the review is sent once per turn, as
// soon as the agent is idle (a follow-up queued while streaming would wait for the next prompt).
export const SETTLED_EVENTS = ['agent_settled', 'agent_end'];
const IDLE_POLL_MS = 10;
const IDLE_WAIT_MS = 10000;

function whenIdle(ctx, action, waited = 0) {
  if (typeof ctx?.isIdle !== 'function' || ctx.isIdle() || waited >= IDLE_WAIT_MS) {
    action();
    return;
  }
  setTimeout(() => whenIdle(ctx, action, waited + IDLE_POLL_MS), IDLE_POLL_MS);
}

/**
 * The two handlers. `options` may fix `scope`, `cwd`, `budget`, `command`, `env`, `timeoutMs`,
 * or replace `retrieveContext(invocation, {timeoutMs, cwd})` (default: ask the warm daemon, else run `sbuf`).
 */
export function createLifecycle(pi, options = {}) {
  const env = options.env ?? process.env;
  let scope = options.scope ?? selectScope({ env, cwd: options.cwd });
  let captureTurn = false;
  let scheduled = false;

  async function beforeAgentStart(event, ctx) {
    try {
      const prompt = event?.prompt;
      captureTurn = typeof prompt === 'string' && prompt.includes(CAPTURE_MARKER);
      scheduled = false;
      if (captureTurn) return undefined;
      const cwd = ctx?.cwd ?? options.cwd;
      scope = options.scope ?? selectScope({ env, cwd });
      const content = await recall(prompt, {
        scope,
        budget: options.budget ?? DEFAULT_BUDGET,
        command: options.command,
        env,
        cwd,
        timeoutMs: options.timeoutMs ?? DEFAULT_TIMEOUT_MS,
        retrieve: options.retrieveContext ?? retrieveContext,
      });
      return content === null ? undefined : { message: { customType: CONTEXT_CUSTOM_TYPE, content, display: false } };
    } catch {
      return undefined;
    }
  }

  function agentSettled(_event, ctx) {
    if (captureTurn || scheduled) return;
    scheduled = true;
    const message = { customType: CAPTURE_CUSTOM_TYPE, content: captureInstruction(scope), display: false };
    whenIdle(ctx, () => pi.sendMessage(message, { triggerTurn: true, deliverAs: 'followUp' }));
  }

  return { beforeAgentStart, agentSettled };
}

export default function stormbuffer(pi, options) {
  const lifecycle = createLifecycle(pi, options);
  pi.on('before_agent_start', lifecycle.beforeAgentStart);
  for (const name of SETTLED_EVENTS) pi.on(name, lifecycle.agentSettled);
}
