// The operator's page: reads the daemon's JSON-RPC methods over POST /ui/rpc and follows
// GET /ui/events. Everything shown is set as text (never as HTML): tool descriptions and
// errors come from programs the host runs.
"use strict";

const PAGE_KEY = "toolhost.page";
const OAUTH_KEY = "toolhost.oauth_server";
const $ = (id) => document.getElementById(id);

// --- talking to the daemon --------------------------------------------------------------

let pageToken = sessionStorage.getItem(PAGE_KEY);
let rpcId = 0;

class LoginNeeded extends Error {}

// Exchanges what we have (a login code, the TCP token, or nothing on the Unix socket) for
// a page token.
async function login(headers) {
  const r = await fetch("/ui/login", { method: "POST", headers });
  if (!r.ok) throw new LoginNeeded(await r.text());
  pageToken = (await r.json()).page_token;
  sessionStorage.setItem(PAGE_KEY, pageToken);
}

async function rpc(method, params = {}) {
  const r = await fetch("/ui/rpc", {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-Toolhost-Page": pageToken || "" },
    body: JSON.stringify({ jsonrpc: "2.0", id: ++rpcId, method, params }),
  });
  if (r.status === 401) { forgetPage(); throw new LoginNeeded(await r.text()); }
  const reply = await r.json();
  if (reply.error) throw new Error(`${method}: ${reply.error.message}`);
  return reply.result;
}

function forgetPage() {
  pageToken = null;
  sessionStorage.removeItem(PAGE_KEY);
}

// Follows the event stream (fetch, so the page token goes in a header, never in the URL),
// reconnecting after a pause when it ends. One at a time.
let following = false;
async function follow() {
  if (following) return;
  following = true;
  try { await followLoop(); } finally { following = false; }
}

async function followLoop() {
  for (let pause = 500; ; pause = Math.min(pause * 2, 10000)) {
    try {
      const r = await fetch("/ui/events", { headers: { "X-Toolhost-Page": pageToken || "" } });
      if (r.status === 401) { forgetPage(); setTimeout(start); return; }
      if (!r.ok || !r.body) throw new Error(`events: ${r.status}`);
      setLive(true);
      pause = 250; // doubled to 500 for the next pause
      refreshAll().catch(showProblem);
      const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffered = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffered += value;
        let end;
        while ((end = buffered.indexOf("\n\n")) >= 0) {
          dispatch(buffered.slice(0, end));
          buffered = buffered.slice(end + 2);
        }
      }
    } catch (e) {
      if (e instanceof LoginNeeded) { setTimeout(start); return; }
    }
    setLive(false);
    await new Promise((r) => setTimeout(r, pause));
  }
}

function dispatch(block) {
  let name = "message", data = "";
  for (const line of block.split("\n")) {
    if (line.startsWith("event: ")) name = line.slice(7);
    else if (line.startsWith("data: ")) data += line.slice(6);
  }
  if (!data) return;
  const event = JSON.parse(data);
  const handler = {
    tools_changed: () => { later(refreshTools); later(refreshStatus); later(refreshQuarantine); },
    servers: () => { renderServers(event.servers); later(refreshStatus, 500); },
    config: () => { renderConfig(event); later(refreshStatus); },
    // A call's end is in the audit log, and a new session shows first with its calls.
    calls: () => { renderCalls(event.calls); later(refreshAudit, 1000); later(refreshSessions, 1000); later(refreshGuards, 1000); later(refreshTimeline, 1000); },
    metrics: () => charts.add(event.exposition),
    approval_event: () => later(refreshApprovals),
    resync: () => refreshAll(),
  }[name];
  if (handler) handler();
}

// Runs `f` once within `ms`, however many events ask for it meanwhile.
const pending = new Map();
function later(f, ms = 100) {
  if (pending.has(f)) return;
  pending.set(f, setTimeout(() => { pending.delete(f); f().catch(showProblem); }, ms));
}

function setLive(on) {
  $("live").textContent = on ? "live" : "offline";
  $("live").className = "badge " + (on ? "ok" : "off");
}

function showProblem(e) {
  if (e instanceof LoginNeeded) return start();
  $("problem").hidden = false;
  $("problem").textContent = String(e.message || e);
}

// --- small DOM helpers ------------------------------------------------------------------

function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "onclick") el.addEventListener("click", v);
    else if (v !== undefined && v !== null && v !== false) el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) el.append(c instanceof Node ? c : document.createTextNode(c ?? ""));
  return el;
}

function fill(id, rows, empty) {
  const el = $(id);
  el.replaceChildren(...rows);
  if (!rows.length && empty) el.append(h(el.tagName === "TBODY" ? "tr" : "li", { class: "muted" },
    el.tagName === "TBODY" ? h("td", { colspan: 9 }, empty) : empty));
}

// An answer's list that is left out when empty.
const list = (x) => x || [];

function count(id, n) { $(id).textContent = n ? `(${n})` : ""; }

const when = (ms) => ms ? new Date(ms).toLocaleString() : "";
const elapsed = (ms) => ms < 1000 ? `${ms} ms` : ms < 60000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.floor(ms / 60000)} min ${Math.floor(ms / 1000) % 60} s`;

// Acts, then shows the error if any; the button stays disabled while it runs.
function action(label, cls, f) {
  const b = h("button", { class: cls }, label);
  b.addEventListener("click", async (e) => {
    e.stopPropagation();
    b.disabled = true;
    try { await f(); } catch (err) { showProblem(err); } finally { b.disabled = false; }
  });
  return b;
}

// --- what the page shows ----------------------------------------------------------------

// The frontend's name of a session: as the audit log says it (meta `client`, else the
// MCP client's name).
function frontendOf(session) {
  const m = (session && session.meta) || {};
  return m.client || (m.clientInfo && m.clientInfo.name) || (m.mcp_client && m.mcp_client.name) || "";
}

// How a session's frontend reaches the host: through the MCP facade, or the socket itself.
const reachOf = (session) => (session.meta || {}).mcp_client ? "MCP facade" : "socket";

const state = { showEphemeral: false, sessions: new Map(), calls: [], callsAt: 0, audit: [], tools: null };

async function refreshAll() {
  await Promise.all([refreshStatus(), refreshTools(), refreshSessions(), refreshQuarantine(),
    refreshSkills(), refreshAudit(), refreshApprovals(), refreshGuards(), refreshTimeline()]);
}

async function refreshStatus() {
  const s = await rpc("host.status");
  const hl = s.health;
  $("health").textContent = hl.status;
  $("health").className = "badge " + hl.status;
  $("about").textContent = `toolhost ${hl.version} · up ${elapsed(hl.uptime_s * 1000)} · ${hl.tools} tools · ${hl.sessions} sessions`;
  renderServers(s.servers);
  renderCalls(s.calls);
  renderConfig(s.config);
  const problems = [
    ...list(hl.custom_tool_errors).map((e) => `custom tool: ${e}`),
    ...list(hl.skill_errors).map((e) => `skill: ${e}`),
    ...list(hl.session_event_errors).map((e) => `session event: ${e}`),
    ...list(hl.clashes).map((c) => `name clash: ${c.name} (kept ${c.kept}, dropped ${c.dropped})`),
    ...(hl.pins_error ? [`pin file: ${hl.pins_error}`] : []),
  ];
  fill("problems", problems.map((p) => h("li", { class: "error" }, p)), "none");
}

function renderServers(servers) {
  count("servers-count", servers.length);
  fill("servers-rows", servers.map((s) => {
    const signIn = s.transport !== "stdio"
      ? action(s.state === "auth_required" ? "Sign in" : "Sign in again", s.state === "auth_required" ? "primary" : "", () => signInTo(s.name))
      : "";
    return [
      h("tr", { "data-server": s.name },
        h("td", {}, h("b", {}, s.name), h("div", { class: "muted" }, s.transport)),
        h("td", { class: "state-" + s.state }, s.state.replace("_", " ")),
        h("td", { class: "num" }, String(s.tools)),
        h("td", { class: "num" }, s.pid ? `pid ${s.pid}` : "", s.rss_kib ? h("div", { class: "muted" }, `${(s.rss_kib / 1024).toFixed(1)} MiB`) : ""),
        h("td", {}, when(s.connected_since)),
        h("td", { class: "num" }, String(s.restarts)),
        h("td", {}, signIn)),
      s.last_error ? h("tr", { class: "detail" }, h("td", { colspan: 7, class: "error" }, s.last_error)) : null,
    ].filter(Boolean);
  }).flat(), "no MCP servers configured");
}

function renderCalls(calls) {
  state.calls = calls;
  state.callsAt = Date.now();
  count("calls-count", calls.length);
  fill("calls-rows", calls.map((c) => h("tr", { "data-call": c.call_id },
    h("td", {}, h("b", {}, c.tool), h("div", { class: "muted mono" }, c.call_id)),
    h("td", { class: "mono" }, c.session_id || ""),
    h("td", {}, frontendOf(state.sessions.get(c.session_id))),
    h("td", { class: "num elapsed", "data-age": c.age_ms }, elapsed(c.age_ms)),
    h("td", {}, action("Cancel", "danger", () => rpc("cancel", { call_id: c.call_id }))))), "none");
}

function tickElapsed() {
  const since = Date.now() - state.callsAt;
  for (const td of document.querySelectorAll("td.elapsed")) td.textContent = elapsed(Number(td.dataset.age) + since);
}

async function refreshTools() {
  state.tools = await rpc("list_tools", { format: "mcp", include_deferred: true });
  renderTools();
}

function renderTools() {
  const listed = state.tools || { tools: [], meta: {} };
  const filter = $("tools-filter").value.trim().toLowerCase();
  const rows = listed.tools.map((t) => ({ t, m: listed.meta[t.name] || {} }))
    .filter(({ t, m }) => !filter || t.name.toLowerCase().includes(filter) || `${m.source} ${m.server || ""}`.includes(filter));
  count("tools-count", listed.tools.length);
  fill("tools-rows", rows.map(({ t, m }) => h("tr", { "data-tool": t.name, title: t.description },
    h("td", {}, h("b", {}, t.name)),
    h("td", {}, m.server ? `${m.source}: ${m.server}` : m.source),
    h("td", {}, m.approval || "unclassified"))), "no tools");
}

async function refreshSkills() {
  const s = await rpc("list_skills");
  count("skills-count", s.skills.length);
  fill("skills", s.skills.map((k) => h("li", { title: k.path }, h("b", {}, k.name), ` (${k.source}) — ${k.description}`)), "none");
}

async function refreshSessions() {
  const { sessions } = await rpc("session.list", { limit: 200 });
  state.sessions = new Map(sessions.map((s) => [s.id, s]));
  // Ephemeral sessions (probes, bridges' own) come and go with their connection: hidden
  // unless the operator asks, as `toolhost session list` hides them without `--all`.
  const ephemeral = sessions.filter((s) => s.ephemeral).length;
  const toggle = $("sessions-ephemeral");
  toggle.textContent = `${state.showEphemeral ? "hide" : "show"} ephemeral (${ephemeral})`;
  toggle.onclick = () => { state.showEphemeral = !state.showEphemeral; refreshSessions(); };
  const shownSessions = sessions.filter((s) => state.showEphemeral || !s.ephemeral);
  count("sessions-count", shownSessions.length);
  fill("sessions-rows", shownSessions.map((s) => h("tr", { "data-session": s.id },
    h("td", { class: "mono" }, s.id, s.ephemeral ? h("div", { class: "muted" }, "ephemeral") : ""),
    h("td", {}, frontendOf(s), h("div", { class: "muted" }, reachOf(s)),
      (s.meta || {}).frontend_id ? h("div", { class: "muted mono frontend-id" }, `frontend ${s.meta.frontend_id}`) : ""),
    h("td", {}, s.approval),
    h("td", {}, s.sandbox ? [s.sandbox.policy, s.sandbox.network].filter(Boolean).join(", ") : "config's"),
    h("td", { class: "mono" }, s.workspace, s.profile ? h("div", { class: "muted" }, `profile ${s.profile}`) : ""))), "none");
  renderCalls(state.calls);
}

async function refreshQuarantine() {
  const health = await rpc("host.health");
  const waiting = list(health.trust_waiting);
  count("trust-count", waiting.length);
  // A card with nothing in it takes no column.
  $("trust").hidden = waiting.length === 0;
  const decided = async (method, params) => {
    await rpc(method, params);
    await Promise.all([refreshQuarantine(), refreshTools(), refreshSkills(), refreshStatus()]);
  };
  fill("trust-list", waiting.map((w) => h("div", { class: "card", "data-trust": w.path },
    h("b", {}, w.item), " ", h("span", { class: "warn" }, w.kind),
    h("p", { class: "mono" }, w.workspace),
    h("div", { class: "actions" },
      action("Approve", "primary", () => decided("trust.approve", { path: w.path })),
      action("Trust this folder", "", () => decided("trust.folder", { folder: w.workspace }))))), "none");
  const quarantined = list(health.quarantined);
  count("quarantine-count", quarantined.length);
  $("quarantine").hidden = quarantined.length === 0;
  const cards = await Promise.all(quarantined.map(async (name) => {
    const d = await rpc("tools.diff", { name });
    const q = d.quarantine || {};
    return h("div", { class: "card", "data-quarantined": name },
      h("b", {}, name), " ", h("span", { class: "warn" }, q.reason || ""),
      h("p", {}, q.message || ""),
      list(q.flags).length ? h("p", { class: "error" }, "flagged: " + q.flags.join(", ")) : "",
      h("pre", { class: "diff" }, diffLines(d.diff || "")),
      ...list(d.files && d.files.changes).map((c) => h("pre", { class: "diff" }, diffLines(c.diff))),
      h("div", { class: "actions" }, action("Approve", "primary", async () => {
        await rpc("tools.approve", { name });
        await Promise.all([refreshQuarantine(), refreshTools(), refreshStatus()]);
      })));
  }));
  fill("quarantine-list", cards, "none");
}

// The daemon's unified diff, its added and removed lines marked.
function diffLines(text) {
  return text.split("\n").filter((l, i, all) => l || i < all.length - 1).map((l) =>
    h("span", { class: l.startsWith("+") && !l.startsWith("+++") ? "add"
      : l.startsWith("-") && !l.startsWith("---") ? "del" : "" }, l + "\n"));
}

function renderConfig(c) {
  const facts = [["file", c.path], ["applied", when(c.loaded_at)], ["revision", String(c.revision)],
    ["watching", c.watching || "no"], ["custom tool folders", list(c.custom_tool_folders).join(", ") || "none"]];
  fill("config-facts", facts.flatMap(([k, v]) => [h("dt", {}, k), h("dd", { class: "mono" }, v)]));
  const errors = [
    ...(c.last_error ? [h("li", { class: "error" }, h("pre", {}, c.last_error))] : []),
    ...list(c.warnings).map((w) => h("li", { class: "warn" }, w)),
    ...list(c.custom_tool_errors).map((w) => h("li", { class: "error" }, w)),
  ];
  fill("config-errors", errors, "no errors");
}

async function refreshAudit() {
  state.audit = (await rpc("audit.recent", { limit: 500 })).records;
  renderAudit();
}

function renderAudit() {
  const f = (id) => $(id).value.trim().toLowerCase();
  const [tool, session, client, outcome] = [f("f-tool"), f("f-session"), f("f-client"), $("f-outcome").value];
  const shown = state.audit.slice().reverse().filter((r) =>
    (!tool || r.tool.toLowerCase().includes(tool)) &&
    (!session || (r.session || "").toLowerCase().includes(session)) &&
    (!client || `${r.client || ""} ${r.peer_process || ""}`.toLowerCase().includes(client)) &&
    (!outcome || (outcome === "ok" ? r.ok : !r.ok)));
  fill("audit-rows", shown.map((r) => {
    const row = h("tr", { class: "clickable", "data-audit": r.call_id },
      h("td", {}, when(r.time_ms)),
      h("td", {}, h("b", {}, r.tool), r.server ? h("div", { class: "muted" }, r.server) : ""),
      h("td", { class: "mono" }, r.session || ""),
      h("td", {}, r.client || r.peer_process || ""),
      h("td", { class: r.ok ? "ok" : "bad" }, r.ok ? "ok" : r.error_kind || "error"),
      h("td", { class: "num" }, String(r.duration_ms)));
    row.addEventListener("click", () => {
      const open = row.nextSibling && row.nextSibling.classList.contains("detail");
      if (open) return row.nextSibling.remove();
      row.after(h("tr", { class: "detail" }, h("td", { colspan: 6 }, auditDetail(r))));
    });
    return row;
  }), "no calls yet");
}

// Who decided an approval, as `toolhost approvals` says it.
function describe(by) {
  if (by.via === "caller") return "the caller";
  const who = [by.uid !== undefined && `uid ${by.uid}`, by.pid && `pid ${by.pid}`, by.process && `(${by.process})`].filter(Boolean).join(" ");
  return `${who || "an unnamed peer"} via ${by.via}`;
}

function auditDetail(r) {
  const facts = [["call", r.call_id], ["source", r.source], ["approval", (r.approval || "not asked") + (r.approved ? " (approved: true)" : "")],
    ["arguments", `${r.args_bytes} bytes, sha256 ${r.args_sha256 || "?"} (never stored themselves)`],
    ["result", `${r.output_bytes} bytes` + (r.error_kind ? `, ${r.error_kind}` : "")],
    ["peer", [r.peer_process, r.peer_pid && `pid ${r.peer_pid}`, r.peer_uid !== undefined && `uid ${r.peer_uid}`].filter(Boolean).join(", ")]];
  const d = r.approval_decision;
  if (d) facts.push(["decided", [d.outcome.replace("_", " "), d.by && `by ${describe(d.by)}`, `after ${elapsed(d.waited_ms)}`, d.reason && `(${d.reason})`].filter(Boolean).join(" ")]);
  return h("dl", {}, facts.flatMap(([k, v]) => [h("dt", {}, k), h("dd", { class: "mono" }, v)]));
}

// --- guards: a card per rule, its fill, its refusals, a reset (guards.status / guards.reset) ---

async function refreshGuards() {
  const g = await rpc("guards.status");
  count("guards-count", g.rules.length);
  const counter = (name, c) => c ? `${name} ${c.used}/${c.allowed}` : null;
  fill("guards-list", g.rules.map((r) => {
    const fullest = r.scopes.length ? r.scopes[0].fill : 0;
    const pct = Math.round(fullest * 100);
    // Set through the DOM: the page's CSP refuses style attributes.
    const bar = h("span", { class: pct >= 100 ? "full" : "" });
    bar.style.width = `${pct}%`;
    return h("div", { class: "card", "data-guard": r.name },
      h("b", {}, r.name), r.builtin ? h("span", { class: "muted" }, " built-in") : "",
      r.enabled ? "" : h("span", { class: "warn" }, " disabled"),
      h("p", { class: "muted" }, `${r.limits.join(", ")} per ${r.scope} · ${r.refusals} refused`),
      h("div", { class: "meter", title: `fullest scope ${pct}%` }, bar),
      h("ul", {}, r.scopes.slice(0, 5).map((s) => h("li", { class: "mono" }, s.scope, " ",
        [counter("rate", s.rate), counter("daily", s.daily), counter("running", s.concurrency), counter("loop", s.loop)]
          .filter(Boolean).join(" · ")))),
      r.more_scopes ? h("p", { class: "muted" }, `… ${r.more_scopes} more scopes`) : "",
      h("div", { class: "actions" }, action("Reset", "", async () => {
        await rpc("guards.reset", { rule: r.name });
        await refreshGuards();
      })));
  }), "none");
  fill("guards-errors", list(g.errors).map((e) => h("li", { class: "error" }, e)));
}

// --- pending approvals: one queue for every frontend (approvals.list / approvals.decide) ---

async function refreshApprovals() {
  renderApprovals((await rpc("approvals.list")).pending);
}

function renderApprovals(waiting) {
  count("approvals-count", waiting.length);
  fill("approvals-list", waiting.map((a) => {
    const decide = (decision) => async () => {
      await rpc("approvals.decide", { id: a.id, decision, via: "ui" });
      await refreshApprovals();
    };
    const left = Math.max(0, Math.round((a.deadline_ms - Date.now()) / 1000));
    return h("div", { class: "card", "data-approval": a.id, "data-call": a.call_id },
      h("b", {}, a.tool), " ",
      h("span", { class: "muted" }, [a.class, a.session_id && `session ${a.session_id}`, a.client, a.caller_asked && "its frontend was asked too"].filter(Boolean).join(" · ")),
      h("p", {}, a.summary),
      h("pre", {}, JSON.stringify(a.arguments, null, 2)),
      h("p", { class: "muted" }, `waiting since ${when(a.since_ms)}; refused in ${left} s without a decision`),
      h("div", { class: "actions" },
        action("Allow once", "primary allow-once", decide("allow_once")),
        action("Allow for this session", "allow-session", decide("allow_session")),
        action("Deny", "danger deny", decide("deny"))));
  }), "nothing is waiting");
}

// --- the undo timeline: one per workspace (checkpoint.list / .diff / .restore) ----------

// An open diff or confirmation is not redrawn away by a later event (`force`: it is).
async function refreshTimeline(force = false) {
  if (!force && document.querySelector("#timeline-rows tr.detail")) return;
  const sel = $("timeline-ws");
  const t = await rpc("checkpoint.list", sel.value ? { workspace: sel.value, limit: 100 } : { limit: 100 });
  const all = [...new Set([t.workspace, ...list(t.workspaces)])].sort();
  if (sel.options.length !== all.length || [...sel.options].some((o, i) => o.value !== all[i]))
    sel.replaceChildren(...all.map((w) => h("option", { value: w }, w)));
  sel.value = t.workspace;
  count("timeline-count", t.entries.length);
  $("timeline-state").textContent = [t.disabled && `no checkpoints: ${t.disabled}`,
    t.lost && `${t.lost} entries lost (a damaged store)`, !t.watched && t.entries.length && "no change watcher: each checkpoint walks the tree"]
    .filter(Boolean).join(" · ");
  fill("timeline-rows", t.entries.map(timelineRow), "no changes recorded");
}

function timelineRow(e) {
  const what = e.kind === "outside"
    ? h("span", { class: "warn" }, "outside the host")
    : [h("b", {}, e.tool || e.kind), e.restores ? h("div", { class: "muted" }, `undoes ${e.restores}`) : "",
      e.call_id ? h("div", { class: "muted mono" }, e.call_id) : ""];
  const files = e.files.map((f) => h("div", { class: "mono" }, f.path, " ",
    h("span", { class: "muted" }, f.change + (f["+lines"] !== undefined ? ` +${f["+lines"]} -${f["-lines"]}` : ""))));
  const row = h("tr", { class: "clickable", "data-checkpoint": e.id, "data-kind": e.kind },
    h("td", {}, when(e.time)), h("td", {}, what), h("td", {}, e.frontend || ""), h("td", {}, files),
    h("td", {}, action("Restore…", "restore", () => askRestore(e, row))));
  row.addEventListener("click", async () => {
    if (closeDetail(row)) return;
    // The detail row goes in at once, so an event's redraw while the diff is on its way
    // keeps it (and the click) instead of drawing the table afresh without it.
    const pre = h("pre", { class: "loading" }, "…");
    row.after(h("tr", { class: "detail" }, h("td", { colspan: 5 }, pre)));
    const d = await rpc("checkpoint.diff", { id: e.id }).catch((err) => ({ diff: String(err.message || err) }));
    pre.replaceChildren(...unifiedLines(d.diff));
    pre.className = "diff";
  });
  return row;
}

// Removes the row's open detail (a diff or a confirmation); whether there was one.
function closeDetail(row) {
  const next = row.nextSibling;
  if (!next || !next.classList.contains("detail")) return false;
  next.remove();
  return true;
}

function unifiedLines(text) {
  return (text || "(no textual change)").split("\n").map((l) =>
    h("span", { class: l.startsWith("+") && !l.startsWith("+++") ? "add" : l.startsWith("-") && !l.startsWith("---") ? "del" : "" }, l + "\n"));
}

// The confirmation: what a restore would put back and what it would overwrite (a dry run
// of the same method), then the restore itself.
async function askRestore(e, row) {
  closeDetail(row);
  // Held open while the dry run is on its way (see the diff's click above).
  const holder = h("td", { colspan: 5 }, "…");
  row.after(h("tr", { class: "detail" }, holder));
  const plan = await rpc("checkpoint.restore", { id: e.id, dry_run: true });
  const conflicts = list(plan.conflicts);
  const doIt = (force) => async () => {
    const done = await rpc("checkpoint.restore", { id: e.id, force });
    closeDetail(row);
    await refreshTimeline(true);
    return done;
  };
  const cancel = h("button", { class: "cancel" }, "Cancel");
  const card = h("div", { class: "card", "data-restore": e.id },
    h("p", {}, plan.files.length ? `Restore puts back ${plan.files.length} file(s) as they were before this change:` : "The files are already as they were before this change."),
    h("ul", {}, plan.files.map((f) => h("li", { class: "mono" }, `${f.path} (${f.after ? "put back" : "removed"})`))),
    conflicts.length ? h("p", { class: "error" }, "Changed again since (restoring overwrites these later changes):") : "",
    h("ul", { class: "conflicts" }, conflicts.map((c) => h("li", { class: "mono error" }, `${c.path}: changed by ${c.changed_by}${c.tool ? ` (${c.tool}${c.frontend ? ` from ${c.frontend}` : ""})` : " (outside)"}`))),
    list(plan.not_restorable).length ? h("p", { class: "muted" }, "Cannot be restored: " + plan.not_restorable.join(", ")) : "",
    h("div", { class: "actions" },
      conflicts.length ? action("Overwrite and restore", "danger confirm-restore", doIt(true)) : action("Restore", "primary confirm-restore", doIt(false)),
      cancel));
  cancel.addEventListener("click", (ev) => { ev.stopPropagation(); closeDetail(row); });
  card.addEventListener("click", (ev) => ev.stopPropagation());
  holder.replaceChildren(card);
}

// --- sign-in to an HTTP MCP server (mcp.login: the browser comes back to /ui/oauth) -----

async function signInTo(name) {
  const redirect = `${location.origin}/ui/oauth`;
  const { authorization_url } = await rpc("mcp.login", { name, redirect_uri: redirect });
  if (!authorization_url) return refreshStatus();
  sessionStorage.setItem(OAUTH_KEY, name);
  location.assign(authorization_url);
}

async function finishSignIn() {
  const name = sessionStorage.getItem(OAUTH_KEY);
  sessionStorage.removeItem(OAUTH_KEY);
  const back = location.href;
  history.replaceState(null, "", "/ui/");
  if (name) await rpc("mcp.login", { name, callback_url: back });
}

// --- charts: calls/s, p50/p99 latency and errors/s per source, from /metrics' counters ---

const SOURCES = ["builtin", "custom", "mcp", "unknown"];
const POINTS = 60;

const charts = {
  last: null,
  history: [], // { rate: {src: n}, errors: {src: n}, p50: {src: ms}, p99: {src: ms} }

  add(text) {
    const now = parse(text);
    if (this.last) {
      const point = { rate: {}, errors: {}, p50: {}, p99: {} };
      const seconds = Math.max((now.at - this.last.at) / 1000, 0.001);
      for (const src of SOURCES) {
        const a = now.by[src], b = this.last.by[src];
        if (!a) continue;
        point.rate[src] = (a.calls - (b ? b.calls : 0)) / seconds;
        point.errors[src] = (a.errors - (b ? b.errors : 0)) / seconds;
        const delta = a.buckets.map(([le, n]) => [le, n - ((b && b.buckets.find((x) => x[0] === le)) || [0, 0])[1]]);
        point.p50[src] = quantile(delta, 0.5);
        point.p99[src] = quantile(delta, 0.99);
      }
      this.history.push(point);
      if (this.history.length > POINTS) this.history.shift();
      this.draw();
    }
    this.last = now;
  },

  draw() {
    draw("chart-rate", this.history, [["rate", ""]]);
    draw("chart-latency", this.history, [["p50", ""], ["p99", "p99"]]);
    draw("chart-errors", this.history, [["errors", ""]]);
    const seen = SOURCES.filter((s) => this.history.some((p) => p.rate[s] !== undefined));
    fill("chart-legend", seen.map((s) => h("span", {}, h("i", { class: "src-" + s }), s)));
  },
};

// Sums the exposition's call counters and latency buckets per source.
function parse(text) {
  const by = {};
  const of = (src) => (by[src] ||= { calls: 0, errors: 0, buckets: new Map() });
  for (const line of text.split("\n")) {
    const m = /^(toolhost_calls_total|toolhost_call_duration_seconds_bucket)\{([^}]*)\} (\S+)/.exec(line);
    if (!m) continue;
    const labels = Object.fromEntries([...m[2].matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((x) => [x[1], x[2]]));
    const value = Number(m[3]);
    const s = of(labels.source);
    if (m[1] === "toolhost_calls_total") {
      s.calls += value;
      if (labels.outcome !== "ok") s.errors += value;
    } else {
      const le = labels.le === "+Inf" ? Infinity : Number(labels.le);
      s.buckets.set(le, (s.buckets.get(le) || 0) + value);
    }
  }
  for (const s of Object.values(by)) s.buckets = [...s.buckets].sort((a, b) => a[0] - b[0]);
  return { at: Date.now(), by };
}

// The bucket bound (ms) under which a fraction `q` of the window's calls finished.
function quantile(buckets, q) {
  const total = buckets.length ? buckets[buckets.length - 1][1] : 0;
  if (total <= 0) return undefined;
  const bound = buckets.find(([, n]) => n >= q * total);
  return bound && Number.isFinite(bound[0]) ? bound[0] * 1000 : undefined;
}

const SVG = "http://www.w3.org/2000/svg";
function draw(id, history, series) {
  const svg = $(id);
  const values = history.flatMap((p) => series.flatMap(([k]) => Object.values(p[k]))).filter((v) => v !== undefined);
  const max = Math.max(1e-9, ...values);
  const parts = [];
  for (const [key, cls] of series) for (const src of SOURCES) {
    const pts = history.map((p, i) => p[key][src] === undefined ? null : `${(i * 300) / (POINTS - 1)},${100 - (p[key][src] / max) * 92}`).filter(Boolean);
    if (pts.length < 2) continue;
    const line = document.createElementNS(SVG, "polyline");
    line.setAttribute("points", pts.join(" "));
    line.setAttribute("class", `src-${src} ${cls}`);
    parts.push(line);
  }
  const label = document.createElementNS(SVG, "text");
  label.setAttribute("x", "2");
  label.setAttribute("y", "9");
  label.textContent = `max ${max < 10 ? max.toFixed(2) : Math.round(max)}`;
  parts.push(label);
  svg.replaceChildren(...parts);
}

// --- start ------------------------------------------------------------------------------

async function start() {
  $("main").hidden = true;
  try {
    const code = new URLSearchParams(location.hash.slice(1)).get("code");
    if (code) {
      history.replaceState(null, "", location.pathname + location.search);
      await login({ "X-Toolhost-Login": code });
    } else if (!pageToken) {
      await login({}); // the Unix socket needs nothing more
    }
  } catch (e) {
    if (!(e instanceof LoginNeeded)) return showProblem(e);
    $("login").hidden = false;
    return;
  }
  $("login").hidden = true;
  $("main").hidden = false;
  if (location.pathname === "/ui/oauth") await finishSignIn().catch(showProblem);
  follow();
}

$("login").addEventListener("submit", async (e) => {
  e.preventDefault();
  try {
    await login({ Authorization: `Bearer ${$("token").value.trim()}` });
    $("token").value = "";
    $("login-error").textContent = "";
    start();
  } catch (err) {
    $("login-error").textContent = err instanceof LoginNeeded ? "That token was refused." : String(err);
  }
});
for (const id of ["f-tool", "f-session", "f-client", "f-outcome"]) $(id).addEventListener("input", renderAudit);
$("tools-filter").addEventListener("input", renderTools);
$("timeline-ws").addEventListener("change", () => refreshTimeline(true).catch(showProblem));
setInterval(tickElapsed, 1000);
// Uptime and the servers' memory change without an event.
setInterval(() => { if (pageToken && !$("main").hidden) later(refreshStatus); }, 10000);
start();
