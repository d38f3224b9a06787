// toolhost's code-mode runner: runs ONE program, then exits (proto-docs/code-mode.md).
//
// The daemon starts it ahead of need (a warm spare), under the sandbox, Node's permission
// model (no child processes, workers or file writes) and a memory limit. Its only peer is
// the daemon, over stdin/stdout (newline JSON):
//   daemon -> runner  {op:"run", code, tools:[names], cwd, max_output, max_calls}
//                     {op:"reply", id, ok, value | error:{kind, message, details}}
//   runner -> daemon  {op:"ready"}
//                     {op:"call", id, tool, args}
//                     {op:"progress", progress, total, message}
//                     {op:"done", ok, output, truncated, result | error, phase}
// Nothing the program does here is trusted by the daemon: every call it asks for goes
// through the daemon's pipeline, so a program that forges a line gains nothing.
import { stripTypeScriptTypes } from 'node:module';
import vm from 'node:vm';
import { format } from 'node:util';

// The runner's own JSON, taken before the program runs: a program that patches the global
// one garbles only its own values, never the lines to and from the daemon.
const { stringify, parse } = JSON;
const write = process.stdout.write.bind(process.stdout);
const send = (msg) => write(stringify(msg) + '\n');

class ToolError extends Error {
  constructor(tool, kind, message, details) {
    super(message);
    this.name = 'ToolError';
    this.tool = tool;
    this.kind = kind;
    this.details = details;
  }
}

let output = '';
let outputBytes = 0;
let truncated = false;
let maxOutput = 65536;
let finished = false;

function capture(text) {
  if (truncated) return;
  const bytes = Buffer.byteLength(text);
  if (outputBytes + bytes > maxOutput) {
    // Cut at a character boundary within the budget.
    output += Buffer.from(text).subarray(0, maxOutput - outputBytes).toString().replace(/\uFFFD$/, '');
    outputBytes = maxOutput;
    truncated = true;
    return;
  }
  output += text;
  outputBytes += bytes;
}

const log = (...args) => capture(format(...args) + '\n');
const programConsole = Object.freeze({
  log, info: log, debug: log, warn: log, error: log, trace: log,
  dir: (v) => log(v),
  table: (v) => log(v),
});
// The channel is the daemon's: what the program writes goes to its output instead.
process.stdout.write = (chunk) => { capture(String(chunk)); return true; };
process.stderr.write = (chunk) => { capture(String(chunk)); return true; };
globalThis.console = programConsole;

function finish(msg) {
  if (finished) return;
  finished = true;
  send({ op: 'done', output, truncated, ...msg });
  // Let the line drain, then go: one program per process.
  process.stdout.once('drain', () => process.kill(process.pid, 'SIGKILL'));
  setImmediate(() => { if (!process.stdout.writableNeedDrain) process.kill(process.pid, 'SIGKILL'); });
}

const realExit = process.exit.bind(process);
process.exit = (code) => {
  finish({ ok: false, phase: 'exit', error: `the program called process.exit(${code ?? ''})` });
  return undefined;
};
process.on('uncaughtException', (e) => finish({ ok: false, phase: 'exception', error: describe(e) }));
process.on('unhandledRejection', (e) => log('Unhandled rejection:', describe(e)));

function describe(e) {
  if (e instanceof ToolError) return `ToolError (${e.kind}) from ${e.tool}: ${e.message}`;
  if (e && typeof e.stack === 'string') {
    // Keep the program's own frames; the runner's are noise to the model.
    const lines = e.stack.split('\n');
    return [lines[0], ...lines.slice(1).filter((l) => l.includes('program.ts'))].join('\n');
  }
  return String(e);
}

const pending = new Map();
let nextId = 1;
// code_mode.max_inner_calls: past it a call is refused here, without a round trip (the
// daemon refuses it too; this only spares a runaway loop 100,000 of them).
let maxCalls = Infinity;

function callTool(name, args) {
  if (nextId > maxCalls) {
    return Promise.reject(new ToolError(name, 'limited',
      `the program made more than code_mode.max_inner_calls (${maxCalls}) tool calls`));
  }
  return new Promise((resolve, reject) => {
    const id = nextId++;
    pending.set(id, { resolve, reject, name });
    send({ op: 'call', id, tool: name, args: args === undefined ? {} : args });
  });
}

function makeTools(names) {
  const target = Object.create(null);
  for (const name of names) {
    target[name] = (args) => callTool(name, args);
  }
  Object.freeze(target);
  return new Proxy(target, {
    get(t, p) {
      if (typeof p !== 'string' || p === 'then') return undefined;
      if (Object.prototype.hasOwnProperty.call(t, p)) return t[p];
      return async () => {
        throw new ToolError(p, 'unknown_tool', `No tool '${p}' is available to this program (see tools in the run_code description)`);
      };
    },
    set() { return false; },
    defineProperty() { return false; },
    deleteProperty() { return false; },
  });
}

function progress(p, total, message) {
  if (typeof p === 'string') {
    send({ op: 'progress', message: p });
  } else if (p && typeof p === 'object') {
    send({ op: 'progress', progress: p.progress, total: p.total, message: p.message });
  } else {
    send({ op: 'progress', progress: Number(p), total, message });
  }
}

function toJson(value) {
  if (value === undefined) return undefined;
  try {
    return parse(stringify(value));
  } catch {
    return String(value);
  }
}

/** The program as a function: wrapped first, so `return` and top-level `await` parse; type
 * stripping keeps every position, so line numbers stay the program's own. */
function compile(code) {
  const wrapped = `(async (tools, progress, ToolError, console) => {\n${code}\n})`;
  const js = stripTypeScriptTypes(wrapped, { mode: 'strip' });
  return new vm.Script(js, {
    filename: 'program.ts',
    lineOffset: -1,
    importModuleDynamically: vm.constants.USE_MAIN_CONTEXT_DEFAULT_LOADER,
  }).runInThisContext();
}

async function run(msg) {
  maxOutput = msg.max_output ?? maxOutput;
  maxCalls = msg.max_calls ?? maxCalls;
  try {
    if (msg.cwd) process.chdir(msg.cwd);
  } catch {}
  let fn;
  try {
    fn = compile(msg.code);
  } catch (e) {
    // vm names `program.ts:N` (already the program's line); the type stripper `:N` of
    // the wrapped text (one line more).
    const where = typeof e.stack === 'string' ? e.stack.split('\n')[0] : '';
    const vmLine = /program\.ts:(\d+)/.exec(where);
    const stripLine = /^:(\d+)$/.exec(where);
    const line = vmLine ? Number(vmLine[1]) : stripLine ? Number(stripLine[1]) - 1 : undefined;
    return finish({
      ok: false,
      phase: 'syntax',
      error: `SyntaxError: ${e.message}${line !== undefined ? ` (line ${line})` : ''}`,
      line,
    });
  }
  try {
    const value = await fn(makeTools(msg.tools || []), progress, ToolError, programConsole);
    finish({ ok: true, result: toJson(value) });
  } catch (e) {
    finish({ ok: false, phase: 'exception', error: describe(e) });
  }
}

function handle(msg) {
  if (msg.op === 'run') {
    run(msg);
  } else if (msg.op === 'reply') {
    const p = pending.get(msg.id);
    if (!p) return;
    pending.delete(msg.id);
    if (msg.ok) p.resolve(msg.value);
    else {
      const err = msg.error || {};
      p.reject(new ToolError(p.name, err.kind || 'failed', err.message || 'tool failed', err.details));
    }
  }
}

let buf = '';
/** Handles the complete lines of what the daemon sent. */
function receive(chunk) {
  buf += chunk;
  let i;
  while ((i = buf.indexOf('\n')) >= 0) {
    const line = buf.slice(0, i);
    buf = buf.slice(i + 1);
    if (line) {
      try {
        handle(parse(line));
      } catch {}
    }
  }
}
process.stdin.setEncoding('utf8');
process.stdin.on('data', receive);
process.stdin.on('end', () => realExit(0));

// The rehearsal, paid while the runner is a spare, not by the program: all a run does
// before the program's first line that does not need the program. The type stripper is a
// WebAssembly module, loaded in 50-150 ms and then compiled function by function as a
// source first needs them (up to ~10 ms more for each new kind of syntax, measured): a
// sample with the usual syntax, TypeScript and JavaScript, compiles most of it. Then
// vm's compiler, the tools object, and the line handler (with a reply to no call).
compile(`const n: number = 1; type T = { a?: string[] } | null; interface I<X> { x: X }
let t: T = null as T; const i = { x: n } as I<number>; label: for (const [k, v] of Object.entries({ a: 1 })) { if (!k || v > 1) continue label; }
for (let j = 0; j < 1; j++) { switch (j) { case 0: break; default: } }
const f = async (x: number, ...ys: string[]): Promise<number> => (await x) ?? ys.length;
class C<X> { p = 1; #q = 2; static s = 3; m(a: X): X { return a; } get g() { return this.#q; } }
try { throw new Error(\`t \${i.x}\`); } catch (e: unknown) { t = { a: [String(e)] }; } finally { t?.a?.at(-1); }
const { a, ...rest } = { a: 1, b: 2 }; const re = /x+/g; do {} while (false);
const r = await Promise.all([1, 2].map(async (m) => f(m!)));
return typeof tools === 'object' && !!re && a + r.length + new C<number>().m(1) + Object.keys(rest).length;`);
makeTools(['rehearsal']);
receive('{"op":"reply","id":0,"ok":true}\n');
send({ op: 'ready' });
