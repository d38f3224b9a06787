// Code mode over `/mcp` (streamable HTTP) with the official TypeScript SDK
// (tests/it/code_mode_more.rs): lists run_code and the declarations resource, reads and
// subscribes to it, runs a program that calls a built-in and an MCP server's tool with
// progress, and cancels a program in the middle. Prints one JSON object of what it saw.
//
// Usage: node code_mode.mjs URL
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const [url] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url));
const client = new Client({ name: 'ts-code-mode', version: '1.0.0' }, { capabilities: {} });
await client.connect(transport);
const seen = {};

const { tools } = await client.listTools();
const runCode = tools.find((t) => t.name === 'run_code');
seen.listed = !!runCode;
seen.description = runCode?.description ?? '';

const { resources } = await client.listResources();
seen.resource_listed = resources.some((r) => r.uri === 'toolhost://code/tools.d.ts');
const read = await client.readResource({ uri: 'toolhost://code/tools.d.ts' });
seen.resource_text = read.contents?.[0]?.text ?? '';
await client.subscribeResource({ uri: 'toolhost://code/tools.d.ts' });
seen.subscribed = true;

const progress = [];
const r = await client.callTool(
  {
    name: 'run_code',
    arguments: {
      code: `const sum = await tools.mcp_fx_add({a: 2, b: 3});
progress("added");
const f = await tools.read_file({path: "hello.txt"});
console.log("sum", JSON.stringify(sum));
return f.content.trim();`,
    },
  },
  undefined,
  { timeout: 60000, onprogress: (p) => progress.push(p.message ?? '') },
);
seen.is_error = !!r.isError;
seen.text = r.content?.map((c) => c.text ?? '').join('\n') ?? '';
seen.structured = r.structuredContent ?? null;
seen.progress = progress;

// A program that waits on a slow call, cancelled once it reports progress.
const controller = new AbortController();
const started = Date.now();
let cancelled;
try {
  await client.callTool(
    {
      name: 'run_code',
      arguments: { code: `progress("sleeping"); await tools.bash({command: "sleep 30"}); return "finished";` },
    },
    undefined,
    { timeout: 60000, signal: controller.signal, onprogress: () => controller.abort('enough') },
  );
  cancelled = 'not cancelled';
} catch (e) {
  cancelled = String(e);
}
seen.cancelled = cancelled;
seen.cancel_ms = Date.now() - started;
// The connection still serves after the cancel.
const again = await client.callTool({ name: 'run_code', arguments: { code: 'return 6 * 7' } });
seen.after_cancel = again.content?.map((c) => c.text ?? '').join('\n') ?? '';

await transport.terminateSession();
await client.close();
process.stdout.write(JSON.stringify(seen) + '\n');
process.exit(0);
