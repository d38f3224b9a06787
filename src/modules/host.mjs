// toolhost's module host: loads MusePi-style tool modules (a factory taking `pi`, returning a
// tool or an array of tools) and runs their calls. The daemon starts one of these per
// daemon and speaks newline JSON with it on stdin/stdout (proto-docs/modules.md); stderr is
// the daemon's log. Only `node:` built-ins are imported, so the file runs from anywhere.

import { AsyncLocalStorage } from "node:async_hooks";
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import path from "node:path";
import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";

const [MAJOR, MINOR] = process.versions.node.split(".").map(Number);
/** Whether this Node strips TypeScript types (built in from 22.6, on by default from 22.18/23.6). */
const TYPESCRIPT =
  typeof process.features?.typescript === "string" ||
  process.execArgv.includes("--experimental-strip-types");
/** How long a session event's handler may run before it is left behind. */
const SESSION_EVENT_MS = 5000;
/** How long `formatApprovalDetails` may run (the daemon waits 1 s, then shows its own summary). */
const APPROVAL_DETAILS_MS = 900;
/** After SIGTERM, how long a `pi.exec` child's group has before SIGKILL. */
const KILL_GRACE_MS = 2000;
/** The most of a `pi.exec` child's stdout or stderr kept in memory. */
const EXEC_CAPTURE = 16 * 1024 * 1024;

/** Loaded module instances by load id: each edit is a new load with its own tools. */
const loads = new Map();
/** Calls running, by request id: their AbortController. */
const calls = new Map();
/** The request id of the call whose code is running (read by `pi.exec`). */
const callScope = new AsyncLocalStorage();
/** Packages a module may take through `pi` (zod, TypeBox), by the file each was resolved
 * to (one instance per installed copy). */
const packages = new Map();

function send(message) {
  process.stdout.write(JSON.stringify(message) + "\n");
}

function messageOf(e) {
  if (e instanceof Error) return e.message || String(e);
  if (typeof e === "string") return e;
  try {
    return JSON.stringify(e);
  } catch {
    return String(e);
  }
}

/** The package `name` as a module sees it: from its folder upward, then from config
 * `custom_tools.node_modules`; `undefined` when none has it. */
function resolvePackage(name, file, nodeModules) {
  const bases = [file, ...nodeModules.map((d) => path.join(d, "_"))];
  for (const base of bases) {
    try {
      const require = createRequire(base);
      const where = require.resolve(name);
      if (!packages.has(where)) packages.set(where, require(name));
      return packages.get(where);
    } catch {
      // not found from here: try the next place
    }
  }
  return undefined;
}

function resolveZod(file, nodeModules) {
  const zod = resolvePackage("zod", file, nodeModules);
  if (zod !== undefined) return zod;
  throw new Error(
    `pi.zod: the zod package was not found from ${path.dirname(file)} upward nor in config custom_tools.node_modules; ` +
      `install it next to the module (npm install zod@4) or add a node_modules folder that has it to custom_tools.node_modules`,
  );
}

/** Marks a property of a built-in `Type.Object` as not required (`Type.Optional`). */
const OPTIONAL = Symbol("optional");

/** `pi.typebox` when `@sinclair/typebox` is not installed: the part of its `Type` builder
 * tool schemas use, making the same plain JSON Schema objects (which the daemon validates
 * arguments against, as it does every tool's). */
const BUILTIN_TYPEBOX = Object.freeze({
  Type: Object.freeze({
    String: (options) => ({ ...options, type: "string" }),
    Number: (options) => ({ ...options, type: "number" }),
    Integer: (options) => ({ ...options, type: "integer" }),
    Boolean: (options) => ({ ...options, type: "boolean" }),
    Null: (options) => ({ ...options, type: "null" }),
    Any: (options) => ({ ...options }),
    Unknown: (options) => ({ ...options }),
    Literal: (value, options) => ({ ...options, const: value, type: typeof value }),
    Array: (items, options) => ({ ...options, type: "array", items }),
    Object: (properties, options) => {
      const required = Object.keys(properties).filter((k) => properties[k]?.[OPTIONAL] !== true);
      return { ...options, type: "object", properties, ...(required.length > 0 ? { required } : {}) };
    },
    Record: (_key, value, options) => ({ ...options, type: "object", additionalProperties: value }),
    Optional: (schema) => Object.defineProperty({ ...schema }, OPTIONAL, { value: true }),
    Union: (schemas, options) => ({ ...options, anyOf: schemas }),
    /** A TypeScript enum or a plain object: its values (not a numeric enum's reverse keys). */
    Enum: (values, options) => ({
      ...options,
      enum: Object.entries(values)
        .filter(([key]) => !/^\d+$/.test(key))
        .map(([, value]) => value),
    }),
  }),
});

const NO_OP_UI = new Proxy(
  {},
  {
    get(_, key) {
      if (key === "then") return undefined;
      if (key === "confirm") return async () => false;
      return async () => undefined;
    },
  },
);

/** A `pi.exec` child runs in its own process group (`detached`), which the daemon is told
 * about so it dies with the call even when this host is stuck; abort and timeout end it
 * here too. */
function exec(cwd, cmd, args = [], options = {}) {
  const { signal, timeout } = options;
  const call = callScope.getStore();
  return new Promise((resolve) => {
    let stdout = "";
    let stderr = "";
    let killed = false;
    let done = false;
    let child;
    try {
      child = spawn(cmd, args, {
        cwd: options.cwd ?? cwd,
        env: options.env ?? process.env,
        detached: true,
        stdio: ["ignore", "pipe", "pipe"],
      });
    } catch (e) {
      resolve({ code: 127, stdout: "", stderr: messageOf(e), killed: false });
      return;
    }
    const kill = () => {
      if (done || child.pid === undefined) return;
      killed = true;
      try {
        process.kill(-child.pid, "SIGTERM");
      } catch {}
      setTimeout(() => {
        try {
          process.kill(-child.pid, "SIGKILL");
        } catch {}
      }, KILL_GRACE_MS).unref();
    };
    const timer = timeout > 0 ? setTimeout(kill, timeout) : undefined;
    const onAbort = () => kill();
    if (signal?.aborted) queueMicrotask(kill);
    else signal?.addEventListener("abort", onAbort, { once: true });
    child.on("spawn", () => {
      if (call !== undefined && calls.has(call)) send({ id: call, pgid: child.pid });
    });
    child.stdout.setEncoding("utf8").on("data", (d) => {
      if (stdout.length < EXEC_CAPTURE) stdout += d;
    });
    child.stderr.setEncoding("utf8").on("data", (d) => {
      if (stderr.length < EXEC_CAPTURE) stderr += d;
    });
    const finish = (code) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      resolve({ code, stdout, stderr, killed });
    };
    child.on("error", (e) => {
      stderr += messageOf(e);
      finish(127);
    });
    child.on("close", (code, sig) => finish(code ?? (sig ? 128 + (signalNumber(sig) ?? 0) : 1)));
  });
}

function signalNumber(name) {
  return { SIGHUP: 1, SIGINT: 2, SIGKILL: 9, SIGTERM: 15 }[name];
}

function makePi(file, cwd, nodeModules) {
  let zod;
  let typebox;
  const logger = {};
  for (const level of ["debug", "info", "warn", "error"]) {
    logger[level] = (...parts) =>
      process.stderr.write(`[${level}] ${path.basename(file)}: ${parts.map(messageOf).join(" ")}\n`);
  }
  return {
    get zod() {
      zod ??= resolveZod(file, nodeModules);
      return zod;
    },
    get typebox() {
      typebox ??= resolvePackage("@sinclair/typebox", file, nodeModules) ?? BUILTIN_TYPEBOX;
      return typebox;
    },
    exec: (cmd, args, options) => exec(cwd, cmd, args, options),
    cwd,
    env: process.env,
    logger,
  };
}

/** The factory a module exports: its default export, else its one exported function. */
function factoryOf(mod) {
  if (typeof mod.default === "function") return mod.default;
  const fns = Object.values(mod).filter((v) => typeof v === "function");
  return fns.length === 1 ? fns[0] : undefined;
}

/** The JSON Schema of a tool's parameters, or why there is none. */
function schemaOf(tool, zod) {
  const p = tool.parameters;
  if (p === undefined || p === null) return { type: "object", properties: {} };
  if (typeof p !== "object") throw new Error("parameters is not a schema");
  let schema;
  if (p._zod !== undefined) {
    const z = zod();
    schema = z.toJSONSchema(p, { io: "input" });
  } else {
    // A JSON Schema as it is (TypeBox schemas are JSON Schema objects).
    schema = JSON.parse(JSON.stringify(p));
  }
  delete schema.$schema;
  if (schema.type !== "object") throw new Error(`parameters must describe an object, not ${JSON.stringify(schema.type ?? "anything")}`);
  if (tool.strict === true) schema.additionalProperties = false;
  return schema;
}

/** Why a factory's result is not a tool, or `undefined` when it is one. */
function problemOf(tool) {
  if (tool === null || typeof tool !== "object") return `the factory returned ${tool === null ? "null" : typeof tool}, not a tool`;
  if (typeof tool.name !== "string" || tool.name === "") return "the tool has no name";
  if (typeof tool.execute !== "function") return `tool '${tool.name}' has no execute function`;
  return undefined;
}

async function load({ id, file, version, cwd, node_modules: nodeModules = [] }) {
  if (/\.m?ts$/.test(file) && !TYPESCRIPT) {
    send({
      id,
      error: `Node ${process.versions.node} cannot load TypeScript: type stripping needs Node 22.6 or later; set custom_tools.node to a newer node (or write the module in JavaScript)`,
    });
    return;
  }
  const pi = makePi(file, cwd, nodeModules);
  let made;
  try {
    const mod = await import(`${pathToFileURL(file).href}?v=${encodeURIComponent(version)}`);
    const factory = factoryOf(mod);
    if (factory === undefined) throw new Error("the module exports no factory function (export default (pi) => tool)");
    made = await factory(pi);
  } catch (e) {
    send({ id, error: messageOf(e), stack: e?.stack });
    return;
  }
  const tools = [];
  const skipped = [];
  const kept = [];
  for (const tool of Array.isArray(made) ? made : [made]) {
    const problem = problemOf(tool);
    if (problem !== undefined) {
      skipped.push({ name: typeof tool?.name === "string" ? tool.name : null, reason: problem });
      continue;
    }
    let parameters;
    try {
      parameters = schemaOf(tool, () => pi.zod);
    } catch (e) {
      skipped.push({ name: tool.name, reason: `tool '${tool.name}': its parameters schema cannot be converted to JSON Schema: ${messageOf(e)}` });
      continue;
    }
    const index = kept.length;
    kept.push(tool);
    tools.push({
      index,
      name: tool.name,
      label: typeof tool.label === "string" ? tool.label : null,
      description: typeof tool.description === "string" ? tool.description : "",
      parameters,
      strict: tool.strict === true,
      hidden: tool.hidden === true,
      deferrable: tool.deferrable === true,
      approval: typeof tool.approval === "string" ? tool.approval : null,
      session_events: typeof tool.onSession === "function",
      approval_details: typeof tool.formatApprovalDetails === "function",
      mcp_server: typeof tool.mcpServerName === "string" && tool.mcpServerName !== "" ? tool.mcpServerName : null,
      mcp_tool: typeof tool.mcpToolName === "string" && tool.mcpToolName !== "" ? tool.mcpToolName : null,
    });
  }
  loads.set(id, { file, cwd, tools: kept });
  send({ id, tools, skipped });
}

/** A tool's `formatApprovalDetails(params)`: the text the user approving the call reads. */
async function approvalDetails({ id, load: loadId, index, params }) {
  const tool = loads.get(loadId)?.tools[index];
  if (typeof tool?.formatApprovalDetails !== "function") {
    send({ id, error: "the tool has no formatApprovalDetails" });
    return;
  }
  let timer;
  try {
    const text = await Promise.race([
      (async () => tool.formatApprovalDetails(params))(),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`it did not answer within ${APPROVAL_DETAILS_MS} ms`)), APPROVAL_DETAILS_MS);
      }),
    ]);
    if (typeof text !== "string" || text.trim() === "") {
      throw new Error(`it returned ${text === "" ? "an empty string" : typeof text}, not a text`);
    }
    send({ id, result: text });
  } catch (e) {
    send({ id, error: messageOf(e) });
  } finally {
    clearTimeout(timer);
  }
}

function normalise(value) {
  if (value === undefined || value === null) return {};
  if (typeof value !== "object") return { content: [{ type: "text", text: String(value) }] };
  return { content: value.content, details: value.details };
}

function contextOf(id, ctx) {
  const history = Array.isArray(ctx.history) ? ctx.history : [];
  return {
    sessionId: ctx.session_id ?? undefined,
    meta: ctx.meta ?? {},
    cwd: ctx.cwd,
    callId: ctx.call_id,
    hasUI: false,
    ui: NO_OP_UI,
    sessionManager: {
      getSessionId: () => ctx.session_id ?? undefined,
      getEntries: () => history,
      getBranch: () => history,
    },
  };
}

async function call({ id, load: loadId, index, params, ctx }) {
  const tool = loads.get(loadId)?.tools[index];
  if (tool === undefined) {
    send({ id, error: "the module was unloaded", kind: "unavailable" });
    return;
  }
  const controller = new AbortController();
  calls.set(id, controller);
  const onUpdate = (update) => {
    if (calls.get(id) === controller) send({ id, update: normalise(update) });
  };
  let reply;
  try {
    let args = params;
    if (tool.parameters?._zod !== undefined && typeof tool.parameters.safeParse === "function") {
      const parsed = tool.parameters.safeParse(params);
      if (!parsed.success) {
        reply = { id, error: parsed.error.message, kind: "invalid_arguments" };
      }
      args = parsed.data;
    }
    if (reply === undefined) {
      const result = await callScope.run(id, () =>
        tool.execute(ctx.call_id, args, onUpdate, contextOf(id, ctx), controller.signal),
      );
      reply = { id, result: normalise(result) };
    }
  } catch (e) {
    reply = { id, error: messageOf(e), stack: e?.stack };
  }
  // A cancelled call was answered by its acknowledgement.
  if (calls.get(id) === controller) {
    calls.delete(id);
    send(reply);
  }
}

function cancel({ id }) {
  const controller = calls.get(id);
  calls.delete(id);
  send({ id, ack: true });
  controller?.abort(new Error("the call was cancelled"));
}

async function session({ id, reason, ctx }) {
  const errors = [];
  const runs = [];
  for (const { file, tools } of loads.values()) {
    for (const tool of tools) {
      if (typeof tool.onSession !== "function") continue;
      const run = (async () => tool.onSession({ reason, sessionId: ctx.session_id ?? undefined }, contextOf(id, ctx)))();
      let timer;
      const bounded = Promise.race([
        run,
        new Promise((_, reject) => {
          timer = setTimeout(() => reject(new Error(`did not finish within ${SESSION_EVENT_MS} ms`)), SESSION_EVENT_MS);
        }),
      ])
        .catch((e) => errors.push(`${file}: ${tool.name} (${reason} event): ${messageOf(e)}`))
        .finally(() => clearTimeout(timer));
      runs.push(bounded);
    }
  }
  await Promise.all(runs);
  send({ id, done: true, errors });
}

const handlers = {
  load,
  call,
  cancel,
  session,
  approval_details: approvalDetails,
  drop: ({ load: loadId }) => loads.delete(loadId),
};

process.on("uncaughtException", (e) => process.stderr.write(`uncaught: ${e?.stack ?? messageOf(e)}\n`));
process.on("unhandledRejection", (e) => process.stderr.write(`unhandled rejection: ${e?.stack ?? messageOf(e)}\n`));

send({ hello: { node: process.versions.node, typescript: TYPESCRIPT, major: MAJOR, minor: MINOR } });
const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
lines.on("line", (line) => {
  let message;
  try {
    message = JSON.parse(line);
  } catch {
    process.stderr.write(`unreadable line from the daemon: ${line.slice(0, 200)}\n`);
    return;
  }
  const handler = handlers[message.op];
  if (handler === undefined) {
    if (message.id !== undefined) send({ id: message.id, error: `unknown op ${message.op}` });
    return;
  }
  Promise.resolve(handler(message)).catch((e) => {
    if (message.id !== undefined) send({ id: message.id, error: messageOf(e), stack: e?.stack });
  });
});
lines.on("close", () => process.exit(0));
