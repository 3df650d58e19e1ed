// The OpenCode plugin's prompt path in one long-lived process, as OpenCode runs it: the plugin is
// loaded once, and each line on stdin (a JSON string, the user's message) goes through its
// `chat.message` handler (recall) and `experimental.chat.system.transform` (the evidence into the
// system prompt) in a new session. Each answer is one JSON line: the handlers' time in ms and the
// system prompt they produced. Usage: <runtime> opencode_hook.mjs <path of stormbuffer.js>
import { createInterface } from 'node:readline';
import { pathToFileURL } from 'node:url';

const { StormbufferPlugin } = await import(pathToFileURL(process.argv[2]).href);
const hooks = await StormbufferPlugin({ client: {}, directory: process.cwd() });
let turn = 0;
for await (const line of createInterface({ input: process.stdin })) {
  const sessionID = `bench-${turn++}`;
  const start = performance.now();
  await hooks['chat.message']({ sessionID }, { parts: [{ type: 'text', text: JSON.parse(line) }] });
  const output = { system: [] };
  await hooks['experimental.chat.system.transform']({ sessionID }, output);
  const ms = performance.now() - start;
  process.stdout.write(`${JSON.stringify({ ms, system: output.system.join('\n') })}\n`);
}
