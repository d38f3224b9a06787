// The naive relay the sharing benchmark (benches/sharing.rs) measures the host against: the
// least a shared relay must do. It starts ONE MCP stdio server (the command line after the
// socket path), initializes it, then accepts any number of clients on a Unix socket and
// forwards their newline JSON-RPC requests to the server, renumbering ids so that clients'
// ids cannot collide, and each answer back to the client that asked. No validation, no
// sessions, no process groups, no timeouts, no logs.
//
// Usage: node naive_relay.mjs SOCKET COMMAND [ARGS...]   (prints "ready" once it listens)
import net from 'node:net';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';

const [socketPath, command, ...args] = process.argv.slice(2);
const server = spawn(command, args, { stdio: ['pipe', 'pipe', 'inherit'] });
const waiting = new Map(); // relay id -> [client socket, the client's own id]
let nextId = 1;

createInterface({ input: server.stdout }).on('line', (line) => {
  const msg = JSON.parse(line);
  const to = msg.id !== undefined && waiting.get(msg.id);
  if (!to) return;
  waiting.delete(msg.id);
  msg.id = to[1];
  to[0].write(JSON.stringify(msg) + '\n');
});

const send = (msg) => server.stdin.write(JSON.stringify(msg) + '\n');
await new Promise((resolve) => {
  waiting.set(0, [{ write: resolve }, 0]);
  send({ jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'naive-relay', version: '1' } } });
});
send({ jsonrpc: '2.0', method: 'notifications/initialized' });

net.createServer((client) => {
  createInterface({ input: client }).on('line', (line) => {
    const msg = JSON.parse(line);
    const id = nextId++;
    waiting.set(id, [client, msg.id]);
    msg.id = id;
    send(msg);
  });
  client.on('error', () => {});
}).listen(socketPath, () => console.log('ready'));

const stop = () => { server.kill(); process.exit(0); };
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
