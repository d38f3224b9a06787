// The official TypeScript MCP SDK as a frontend, driven line by line so a test can restart
// the daemon between its steps (tests/it/http_restart.rs).
//
// Usage: node driver.mjs http URL ROOT        (streamable HTTP; ROOT is its one root)
//        node driver.mjs stdio ROOT BIN ARG... (BIN ARG... spawned in ROOT with the SDK's
//                                               default environment)
// Each line on stdin is a JSON request, each answered by one JSON line on stdout:
//   {"op":"call","command":"pwd"}  -> {"isError":bool,"text":"...","session":"..."}
//   {"op":"tools"}                 -> {"tools":["bash",...]}
//   {"op":"changed"}               -> {"changed":N}  (tools/list_changed heard so far)
//   {"op":"terminate"}             -> {"session":"..."} after an HTTP DELETE of the session
//   {"op":"close"}                 -> {} after the client closed (no DELETE), then exits
// A failed step answers {"error":"..."}.
import { createInterface } from 'node:readline';
import { pathToFileURL } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { StdioClientTransport, getDefaultEnvironment } from '@modelcontextprotocol/sdk/client/stdio.js';
import { ListRootsRequestSchema, ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

const [mode, ...rest] = process.argv.slice(2);
let transport;
let root;
if (mode === 'http') {
  const [url, dir] = rest;
  root = dir;
  // The SDK's default gives up the notification stream after 2 failed reconnects; a
  // daemon restart in a debug build can take longer than that.
  transport = new StreamableHTTPClientTransport(new URL(url), {
    reconnectionOptions: { maxRetries: 60, initialReconnectionDelay: 500, maxReconnectionDelay: 1000, reconnectionDelayGrowFactor: 1 },
  });
} else {
  const [dir, command, ...args] = rest;
  root = dir;
  transport = new StdioClientTransport({ command, args, cwd: dir, env: getDefaultEnvironment(), stderr: 'ignore' });
}

const client = new Client({ name: 'ts-sdk-driver', version: '1.0.0' }, { capabilities: { roots: { listChanged: false } } });
client.setRequestHandler(ListRootsRequestSchema, async () => ({
  roots: [{ uri: pathToFileURL(root).href, name: 'project' }],
}));
let changed = 0;
client.setNotificationHandler(ToolListChangedNotificationSchema, async () => {
  changed += 1;
});
// Stream reconnects are reported here; they are expected while the daemon restarts.
client.onerror = () => {};
await client.connect(transport);

const say = (v) => process.stdout.write(JSON.stringify(v) + '\n');
const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  let req;
  try {
    req = JSON.parse(line);
  } catch {
    say({ error: `not JSON: ${line}` });
    continue;
  }
  try {
    if (req.op === 'call') {
      const r = await client.callTool({ name: 'bash', arguments: { command: req.command } }, undefined, { timeout: 30000 });
      const text = (r.content?.[0]?.text ?? '').trim();
      say({ isError: !!r.isError, text, session: transport.sessionId ?? null });
    } else if (req.op === 'tools') {
      const r = await client.listTools();
      say({ tools: r.tools.map((t) => t.name) });
    } else if (req.op === 'changed') {
      say({ changed });
    } else if (req.op === 'terminate') {
      const session = transport.sessionId;
      await transport.terminateSession();
      say({ session });
    } else if (req.op === 'close') {
      await client.close();
      say({});
      process.exit(0);
    } else {
      say({ error: `unknown op ${req.op}` });
    }
  } catch (e) {
    say({ error: String(e?.message ?? e) });
  }
}
await client.close();
