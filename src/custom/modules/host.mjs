// toolhost's module host: loads MusePi-style tool modules (a factory taking `pi`, returning a
// tool or an array of tools) and runs their calls. The daemon starts one of these per
// daemon and speaks newline JSON with it on stdin/stdout (proto-docs/modules.md); stderr is
// the daemon's log. Only `node:` built-ins are imported, so the file runs from anywhere.

import { AsyncLocalStorage } from "node:async_hooks";
import { ChildProcess, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { closeSync, constants, existsSync, fstatSync, openSync, readFileSync } from "node:fs";
import * as nodeModule from "node:module";
import path from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath, pathToFileURL } from "node:url";

const { createRequire } = nodeModule;

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
/** Calls running, by request id: their AbortController and the questions their `ctx.ui`
 * asked that wait for the frontend's answer. */
const calls = new Map();
/** The request id of the call whose code is running (read by `pi.exec`). */
const callScope = new AsyncLocalStorage();
/** Packages a module may take through `pi` (zod, TypeBox), by the file each was resolved
 * to (one instance per installed copy). */
const packages = new Map();
/** Module URLs whose import failed (see `load`). */
const failedImports = new Set();

/** The workspace modules' files as approved: each file (canonical path) with the SHA-256 of
 * the bytes whose digest the user approved, and the workspaces they came from. The import
 * hook below serves a file of such a workspace only from those bytes, read once and checked,
 * so a file swapped after the approval (or one the approval does not cover) never runs. */
const approvedFiles = new Map();
const gatedRoots = new Set();
/** How many imports the hook refused for a changed file (a load that saw one is tried again
 * at the next scan, where the change makes its module wait for approval again). */
let changedRefusals = 0;

/** Whether `file` lies in a gated workspace, its `node_modules` included: a package the
 * workspace brings is code no approval covers. */
function gated(file) {
  for (const root of gatedRoots) {
    const rel = path.relative(root, file);
    if (rel !== "" && !rel.startsWith("..") && !path.isAbsolute(rel)) return true;
  }
  return false;
}

/** Whether `file` is in a `node_modules` folder. */
function inPackage(file) {
  return file.split(path.sep).includes("node_modules");
}

/** The same bound the daemon reads module files with (discover.rs `MAX_MODULE_BYTES`). */
const MAX_MODULE_BYTES = 16 * 1024 * 1024;

/** A regular file's bytes, never waiting on a FIFO swapped in after approval, never reading
 * more than [`MAX_MODULE_BYTES`]. */
function regularFileBytes(file) {
  const fd = openSync(file, constants.O_RDONLY | constants.O_NONBLOCK);
  try {
    const st = fstatSync(fd);
    if (!st.isFile() || st.size > MAX_MODULE_BYTES) {
      changedRefusals += 1;
      throw new Error(`${file} is no longer a regular file of at most ${MAX_MODULE_BYTES} bytes; it was not run, and waits for approval again`);
    }
    return readFileSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** The approved bytes of `url`, or `undefined` when it is no file of a gated workspace; throws
 * when it is one but not as approved. */
function approvedSource(url) {
  if (!url.startsWith("file:")) return undefined;
  const file = fileURLToPath(url);
  const want = approvedFiles.get(file);
  if (want === undefined && !gated(file)) return undefined;
  if (want === undefined && inPackage(file)) {
    throw new Error(`${file} is a package of the workspace, which no approval covers; it was not run (install the packages a workspace module needs in a folder of config custom_tools.node_modules)`);
  }
  if (want === undefined) {
    throw new Error(`${file} is not part of any approved module of this workspace (only the module's own folder is approved with it); it was not run`);
  }
  const source = regularFileBytes(file);
  if (createHash("sha256").update(source).digest("hex") !== want) {
    changedRefusals += 1;
    throw new Error(`${file} changed since it was approved; it was not run, and waits for approval again`);
  }
  return source;
}

/** Whether `dir` is a gated workspace or lies in one. */
function inWorkspace(dir) {
  return gatedRoots.has(dir) || gated(dir);
}

/** Refuses what a file of a gated workspace (`parent`) reaches through that workspace but
 * Node, following a symlink, loads from outside it (`target`, a real path): a symlinked
 * folder of helpers, a `node_modules` or a package in one that is a symlink out. The load
 * hook would take such a file for the user's; no approval covers it. Where the way stays in
 * the workspace, the load hook decides. */
function refuseLeavingTheWorkspace(specifier, parent, target) {
  if (approvedFiles.has(target) || gated(target)) return;
  let way;
  if (specifier.startsWith("#")) {
    way = parent; // mapped by the `imports` of the package.json the workspace holds
  } else if (specifier.startsWith("file:")) {
    way = fileURLToPath(specifier);
  } else if (/^(\.{1,2}(\/|$)|\/)/.test(specifier)) {
    way = path.resolve(path.dirname(parent), specifier);
  } else {
    // A package: Node takes the first `node_modules/<name>` from the parent's folder up.
    const parts = specifier.split("/");
    const name = parts[0].startsWith("@") ? parts.slice(0, 2).join("/") : parts[0];
    for (let dir = path.dirname(parent); inWorkspace(dir); dir = path.dirname(dir)) {
      const candidate = path.join(dir, "node_modules", name);
      if (existsSync(candidate)) {
        way = candidate;
        break;
      }
      if (path.dirname(dir) === dir) break;
    }
  }
  if (way === undefined || !inWorkspace(way)) return;
  if (inPackage(way)) {
    throw new Error(`${way} is a package of the workspace (a symlink to ${target} outside it), which no approval covers; it was not run (install the packages a workspace module needs in a folder of config custom_tools.node_modules)`);
  }
  throw new Error(`${way} leads out of the workspace (a symlink to ${target}), which no approval covers; it was not run`);
}

/** `module.registerHooks` (Node 22.15+, 23.5+) runs in this thread and covers `import` and
 * `require` alike; without it a workspace module cannot be held to its approved bytes, so
 * none is imported. */
const HOOKS = typeof nodeModule.registerHooks === "function";
if (HOOKS) {
  nodeModule.registerHooks({
    resolve(specifier, context, nextResolve) {
      const resolved = nextResolve(specifier, context);
      const parent = context.parentURL?.startsWith("file:") ? fileURLToPath(context.parentURL) : undefined;
      if (parent !== undefined && resolved.url?.startsWith("file:") && (approvedFiles.has(parent) || gated(parent))) {
        refuseLeavingTheWorkspace(specifier, parent, fileURLToPath(resolved.url));
      }
      return resolved;
    },
    load(url, context, nextLoad) {
      const source = approvedSource(url);
      if (source === undefined) return nextLoad(url, context);
      // Node's own load says which format the file is (and strips a .ts's types after);
      // what it read is not used.
      const { format } = nextLoad(url, context);
      return { format, source, shortCircuit: true };
    },
  });
}

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
    `pi.zod: the zod package was not found from ${path.dirname(file)} upward, in config custom_tools.node_modules nor in the module host's own packages; ` +
      `run \`toolhost modules setup\` (installs the host's pinned zod and TypeBox once), or install it next to the module (npm install zod@4)`,
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

/** What `ctx.ui.confirm`/`select`/`input` ask as an MCP elicitation, and how its answer
 * reads: one property each, so every frontend can render it. */
const QUESTIONS = {
  confirm: (title, message) => ({
    message: message ? `${title}\n\n${message}` : String(title),
    field: "confirmed",
    schema: { type: "boolean", title: String(title), ...(message ? { description: String(message) } : {}) },
    read: (v) => v === true,
    otherwise: false,
  }),
  select: (title, options) => {
    const choices = (Array.isArray(options) ? options : []).map(String);
    return {
      message: String(title),
      field: "choice",
      schema: { type: "string", title: String(title), enum: choices },
      read: (v) => (choices.includes(v) ? v : undefined),
      otherwise: undefined,
    };
  },
  input: (title, placeholder) => ({
    message: String(title),
    field: "value",
    schema: { type: "string", title: String(title), ...(placeholder ? { description: String(placeholder) } : {}) },
    read: (v) => (typeof v === "string" ? v : undefined),
    otherwise: undefined,
  }),
};

/** Why the frontend did not answer, as the module reads it. */
function uiError(method, error) {
  const why =
    error?.code === -32601
      ? "the frontend of this call cannot answer questions (a plain invoke, a subscribe_invoke without \"elicitation\" in its inputs, or an MCP client without the elicitation capability)"
      : error?.code === -32603
        ? "the call ended before the frontend answered"
        : (error?.message ?? "the frontend did not answer");
  return new Error(`ctx.ui.${method}: ${why}`);
}

/** `ctx.ui`: `confirm`, `select` and `input` ask the call's frontend (`ask`, or reject when
 * there is no call to ask through); the rest of the seed's UI context is a no-op here. */
function uiOf(ask) {
  const dialog = (method) => (first, second, opts = {}) => {
    const q = QUESTIONS[method](first, second);
    const params = {
      message: q.message,
      requestedSchema: { type: "object", properties: { [q.field]: q.schema }, required: [q.field] },
    };
    return new Promise((resolve, reject) => {
      // The seed's dialog options: an abort or a timeout dismisses the question.
      const dismiss = () => resolve(q.otherwise);
      if (opts?.signal?.aborted) return dismiss();
      opts?.signal?.addEventListener?.("abort", dismiss, { once: true });
      const timer = opts?.timeout > 0 ? setTimeout(dismiss, opts.timeout) : undefined;
      ask(params, (answer) => {
        clearTimeout(timer);
        if (answer.error !== undefined) return reject(uiError(method, answer.error));
        const r = answer.result ?? {};
        resolve(r.action === "accept" ? q.read(r.content?.[q.field]) : q.otherwise);
      });
    });
  };
  const ui = { confirm: dialog("confirm"), select: dialog("select"), input: dialog("input") };
  return new Proxy(ui, {
    get(target, key) {
      if (key in target) return target[key];
      if (key === "then") return undefined;
      return async () => undefined;
    },
  });
}

/** A `ctx.ui` with nobody to ask (a session event). */
const NO_FRONTEND_UI = uiOf((_, settle) =>
  settle({ error: { message: "there is no frontend to ask outside a call (session events cannot ask)" } }),
);

/** A `pi.exec` child runs in its own process group (`detached`); in a call, that group is
 * the call's (`ChildProcess.prototype.spawn` below). Abort and timeout end it here too, and
 * so does the call's end (`endCall`): the daemon cannot adopt a group whose leader this host
 * already reaped, as its orphans are no longer our descendants. */
function exec(cwd, cmd, args = [], options = {}) {
  const { signal, timeout } = options;
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

/** Every child a call's code starts — through `pi.exec`, or `child_process` directly (spawn,
 * exec, execFile, fork; `detached` or not) — runs in a process group of its own that is the
 * call's: the daemon adopts it (and ends it on a timeout or cancel even when this host is
 * stuck), and the call's end ends it here (`endCall`). Children started outside a call (at
 * import, in a session event) stay in this host's group and die with the host. */
const startChild = ChildProcess.prototype.spawn;
ChildProcess.prototype.spawn = function (options) {
  const running = calls.get(callScope.getStore());
  if (running !== undefined && options !== null && typeof options === "object") options.detached = true;
  const result = startChild.call(this, options);
  if (running !== undefined && this.pid !== undefined && !running.groups.has(this.pid)) {
    running.groups.add(this.pid);
    send({ id: running.id, pgid: this.pid });
  }
  return result;
};

/** A synchronous child (`spawnSync`, `execSync`, `execFileSync`: all go through this one
 * binding) blocks this host until it ends, so nothing here can end it when its call is
 * cancelled or times out: the daemon kills this host's group then. The child is kept in
 * that group (a `detached` asked for is dropped), so it and its own children die with it. */
const spawnSyncBinding = process.binding("spawn_sync");
const startSync = spawnSyncBinding.spawn;
Object.defineProperty(spawnSyncBinding, "spawn", {
  value(options) {
    if (options !== null && typeof options === "object") options.detached = false;
    return startSync.call(this, options);
  },
  writable: false,
  configurable: false,
});

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

/** The bounds the daemon holds a tool schema to (`MAX_SCHEMA_VALUES`, `MAX_SCHEMA_DEPTH`
 * in src/registry/mod.rs), checked here without recursion so that a schema too large or
 * too deep is named in the module's `skipped` rather than sent on a line the daemon cannot
 * read. */
const MAX_SCHEMA_VALUES = 10000;
const MAX_SCHEMA_DEPTH = 64;
function checkSchemaSize(schema) {
  const pending = [[schema, 1]];
  let values = 0;
  while (pending.length > 0) {
    const [v, depth] = pending.pop();
    if (++values > MAX_SCHEMA_VALUES) throw new Error(`holds more than ${MAX_SCHEMA_VALUES} JSON values; a tool schema may hold at most that many`);
    if (depth > MAX_SCHEMA_DEPTH) throw new Error(`nests more than ${MAX_SCHEMA_DEPTH} levels deep; a tool schema may nest at most that deep`);
    if (v !== null && typeof v === "object") for (const c of Object.values(v)) pending.push([c, depth + 1]);
  }
}

/** Why a factory's result is not a tool, or `undefined` when it is one. */
function problemOf(tool) {
  if (tool === null || typeof tool !== "object") return `the factory returned ${tool === null ? "null" : typeof tool}, not a tool`;
  if (typeof tool.name !== "string" || tool.name === "") return "the tool has no name";
  if (typeof tool.execute !== "function") return `tool '${tool.name}' has no execute function`;
  return undefined;
}

async function load({ id, file, version, cwd, node_modules: nodeModules = [], approved }) {
  if (/\.m?ts$/.test(file) && !TYPESCRIPT) {
    send({
      id,
      error: `Node ${process.versions.node} cannot load TypeScript: type stripping needs Node 22.6 or later; set custom_tools.node to a newer node (or write the module in JavaScript)`,
    });
    return;
  }
  if (approved !== undefined) {
    if (!HOOKS) {
      send({
        id,
        error: `Node ${process.versions.node} cannot hold a workspace module to the bytes that were approved (module.registerHooks needs Node 22.15 or later); set custom_tools.node to a newer node`,
      });
      return;
    }
    gatedRoots.add(approved.root);
    for (const [f, sha] of Object.entries(approved.files ?? {})) approvedFiles.set(f, sha);
  }
  const refusedBefore = changedRefusals;
  const pi = makePi(file, cwd, nodeModules);
  let made;
  try {
    // A module whose import failed is imported under a new URL when tried again (its cause
    // fixed): Node keeps a failed import's error for the URL.
    const url = `${pathToFileURL(file).href}?v=${encodeURIComponent(version)}`;
    const retry = failedImports.has(url) ? `&retry=${id}` : "";
    let mod;
    try {
      mod = await import(url + retry);
    } catch (e) {
      failedImports.add(url);
      throw e;
    }
    const factory = factoryOf(mod);
    if (factory === undefined) throw new Error("the module exports no factory function (export default (pi) => tool)");
    made = await factory(pi);
  } catch (e) {
    send({ id, error: messageOf(e), stack: e?.stack, changed: changedRefusals > refusedBefore });
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
    try {
      checkSchemaSize(parameters);
    } catch (e) {
      skipped.push({ name: tool.name, reason: `tool '${tool.name}': its parameters schema ${messageOf(e)}` });
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

/** `ctx.sessionManager`: a read-only view of the session as the daemon keeps it. It keeps
 * no conversation, only the session's calls that ended before this one (`ctx.history`, the
 * last 200, oldest first): each is the seed's tool-result entry on one linear branch,
 * without content (the daemon keeps no results), plus what the daemon knows of it. */
function sessionManagerOf(ctx) {
  let entries;
  const all = () => {
    entries ??= (Array.isArray(ctx.history) ? ctx.history : []).map((c, i, calls) => {
      const ended = c.started_ms + c.duration_ms;
      return {
        type: "message",
        id: c.call_id,
        parentId: i === 0 ? null : calls[i - 1].call_id,
        timestamp: new Date(ended).toISOString(),
        message: { role: "toolResult", toolCallId: c.call_id, toolName: c.tool, isError: !c.ok, content: [], timestamp: ended },
        toolhost: { errorKind: c.error_kind, startedMs: c.started_ms, durationMs: c.duration_ms, argsBytes: c.args_bytes },
      };
    });
    return entries;
  };
  return {
    getSessionId: () => ctx.session_id ?? undefined,
    getCwd: () => ctx.cwd,
    getSessionFile: () => undefined,
    getSessionName: () => undefined,
    getHeader: () => ({ type: "session", id: ctx.session_id ?? undefined, cwd: ctx.cwd }),
    getEntries: () => all().slice(),
    getBranch: () => all().slice(),
    getLeafId: () => all().at(-1)?.id ?? null,
    getLeafEntry: () => all().at(-1),
    getEntry: (id) => all().find((e) => e.id === id),
    getLabel: () => undefined,
  };
}

/** The `ctx` of a call (`running` is its entry in `calls`) or of a session event. */
function contextOf(ctx, running) {
  return {
    sessionId: ctx.session_id ?? undefined,
    meta: ctx.meta ?? {},
    cwd: ctx.cwd,
    callId: ctx.call_id,
    hasUI: running !== undefined && ctx.ui === true,
    ui: running === undefined ? NO_FRONTEND_UI : uiOf((params, settle) => askFrontend(running, params, settle)),
    sessionManager: sessionManagerOf(ctx),
  };
}

/** Sends a question of a running call to the daemon; `settle` hears the `input_response`. */
function askFrontend(running, params, settle) {
  if (calls.get(running.id) !== running) {
    settle({ error: { code: -32603 } });
    return;
  }
  const n = running.nextQuestion++;
  running.questions.set(n, settle);
  send({ id: running.id, input_request: { id: n, kind: "elicitation", params } });
}

/** The call ended: its questions still waiting are answered "the call ended", and what its
 * `pi.exec` children left in their groups is ended (TERM, then KILL). */
function endCall(running) {
  for (const settle of running.questions.values()) settle({ error: { code: -32603 } });
  running.questions.clear();
  const groups = [...running.groups];
  running.groups.clear();
  const signal = (name) => {
    for (const pgid of groups) {
      try {
        process.kill(-pgid, name);
      } catch {}
    }
  };
  if (groups.length === 0) return;
  signal("SIGTERM");
  setTimeout(() => signal("SIGKILL"), KILL_GRACE_MS).unref();
}

async function call({ id, load: loadId, index, params, ctx }) {
  const tool = loads.get(loadId)?.tools[index];
  if (tool === undefined) {
    send({ id, error: "the module was unloaded", kind: "unavailable" });
    return;
  }
  const running = { id, controller: new AbortController(), questions: new Map(), nextQuestion: 1, groups: new Set() };
  calls.set(id, running);
  const onUpdate = (update) => {
    if (calls.get(id) === running) send({ id, update: normalise(update) });
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
        tool.execute(ctx.call_id, args, onUpdate, contextOf(ctx, running), running.controller.signal),
      );
      reply = { id, result: normalise(result) };
    }
  } catch (e) {
    reply = { id, error: messageOf(e), stack: e?.stack };
  }
  // A cancelled call was answered by its acknowledgement.
  if (calls.get(id) === running) {
    calls.delete(id);
    endCall(running);
    send(reply);
  }
}

/** The frontend's answer to a question of call `id`. */
function inputResponse({ id, input_response: answer }) {
  const running = calls.get(id);
  const settle = running?.questions.get(answer?.id);
  if (settle === undefined) return;
  running.questions.delete(answer.id);
  settle(answer);
}

function cancel({ id }) {
  const running = calls.get(id);
  calls.delete(id);
  send({ id, ack: true });
  if (running === undefined) return;
  running.controller.abort(new Error("the call was cancelled"));
  endCall(running);
}

async function session({ id, reason, ctx }) {
  const errors = [];
  const runs = [];
  for (const { file, tools } of loads.values()) {
    for (const tool of tools) {
      if (typeof tool.onSession !== "function") continue;
      const run = (async () => tool.onSession({ reason, sessionId: ctx.session_id ?? undefined }, contextOf(ctx)))();
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
  input_response: inputResponse,
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
