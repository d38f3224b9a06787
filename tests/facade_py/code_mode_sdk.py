"""Drives code mode (`run_code`) with the Python MCP SDK and prints what it saw as JSON.

Usage (a SESSION is ID=WORKSPACE: `toolhost mcp --session ID --workspace WORKSPACE`):
  code_mode_sdk.py views TOOLHOST_BIN SOCKET SESSION...
      For each session: the tool names it lists and `run_code`'s description.
  code_mode_sdk.py run TOOLHOST_BIN SOCKET PLAIN_SESSION STRICT_SESSION
      Over `toolhost mcp`: a program calling a built-in, a custom tool and
      server-everything; a program cancelled while its inner call runs; each bad input;
      and, in the strict session, a write approved (and one declined) by elicitation.
  code_mode_sdk.py era SOCKET
      `/mcp` in the 2026-07-28 era (no initialize, no session): the listing, a program with
      progress, and a cancelled one.
"""

import json
import sys
import time
from contextlib import AsyncExitStack

import anyio
import httpx2
from mcp import ClientSession, StdioServerParameters
from mcp.client.client import Client
from mcp.client.stdio import get_default_environment, stdio_client
from mcp.client.streamable_http import streamable_http_client
import mcp_types as types

WAIT_S = 60


def texts(result) -> str:
    parts = [c.text for c in result.content if isinstance(c, types.TextContent)]
    if result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, separators=(",", ":")))
    return "\n".join(parts)


def outcome(result) -> dict:
    return {"is_error": bool(result.is_error), "text": texts(result)}


async def rpc(socket: str, method: str, params: dict | None = None) -> dict:
    """One JSON-RPC call to the daemon's socket (to watch what runs, never to drive it)."""
    async with httpx2.AsyncClient(transport=httpx2.AsyncHTTPTransport(uds=socket)) as http:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}
        r = await http.post("http://localhost/", json=body)
        return r.json()


async def in_flight(socket: str, tool: str) -> None:
    """Returns once `tool` is a call in flight in the daemon (`host.status`)."""
    with anyio.fail_after(WAIT_S):
        while True:
            status = await rpc(socket, "host.status")
            if any(c.get("tool") == tool for c in status["result"]["calls"]):
                return
            await anyio.sleep(0.05)


async def cancelled_mid_call(call_tool, socket: str, code: str, inner: str) -> dict:
    """Calls `run_code` with `code`, cancels the call once its inner call `inner` is in
    flight (the SDK sends `notifications/cancelled`), and says how it went."""
    seen: dict = {"finished": False}

    async def call() -> None:
        await call_tool("run_code", {"code": code})
        seen["finished"] = True

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        await in_flight(socket, inner)
        tg.cancel_scope.cancel()
    # The daemon ends the program and its inner call; the test waits for that.
    started = time.monotonic()
    with anyio.fail_after(WAIT_S):
        while True:
            status = await rpc(socket, "host.status")
            if not status["result"]["calls"]:
                break
            await anyio.sleep(0.05)
    seen["drained_ms"] = int((time.monotonic() - started) * 1000)
    return seen


async def stdio_session(stack: AsyncExitStack, binary: str, socket: str, session: str, name: str, elicit=None):
    sid, workspace = session.split("=", 1)
    params = StdioServerParameters(
        command=binary,
        args=["mcp", "--socket", socket, "--session", sid, "--workspace", workspace],
        env=get_default_environment(),
    )
    read, write = await stack.enter_async_context(stdio_client(params))
    s = await stack.enter_async_context(
        ClientSession(
            read,
            write,
            client_info=types.Implementation(name=name, version="1"),
            elicitation_callback=elicit,
        )
    )
    await s.initialize()
    return s


def described(tools) -> dict:
    names = [t.name for t in tools]
    code = next((t for t in tools if t.name == "run_code"), None)
    return {"names": names, "description": code.description if code else None}


async def views(binary: str, socket: str, *sessions: str) -> dict:
    out = {}
    for sid in sessions:
        async with AsyncExitStack() as stack:
            s = await stdio_session(stack, binary, socket, sid, "python-code-views")
            out[sid.split("=", 1)[0]] = described((await s.list_tools()).tools)
    return out


# The program of the main run: a built-in, a custom tool and two of server-everything's.
MAIN = """
const file = await tools.read_file({path: "notes.txt"});
const stamped = await tools.cm_stamp({n: 7});
const sum = await tools["mcp_everything_get-sum"]({a: 20, b: 22});
const weather = await tools["mcp_everything_get-structured-content"]({location: "Chicago"});
progress("halfway");
console.log("lines", file.content.trim().split("\\n").length);
return {stamped, sum, weather};
"""

LONG = 'progress("waiting"); await tools["mcp_everything_trigger-long-running-operation"]({duration: 60, steps: 60}); return "finished";'

# Each bad input the issue lists, as a program.
BAD = {
    "syntax": "const a = 1;\nconst b = ;\nreturn a;",
    "unknown_tool": "return await tools.mcp_nowhere_thing({});",
    "allocation": "const b = Buffer.alloc(10 * 1024 ** 3); return b.length;",
    "fork_bomb": """
const cp = process.getBuiltinModule("child_process");
for (let i = 0; i < 10000; i++) cp.spawn("/bin/sh", ["-c", ":(){ :|:& };:"]);
return "forked";""",
    "exit": 'console.log("bye"); process.exit(0);',
    "patching": """
const out: string[] = [];
try { tools.read_file = async () => "patched"; out.push(tools.read_file.length === 0 ? "assigned" : "assign ignored"); } catch (e) { out.push("assign refused"); }
try { Object.defineProperty(tools, "read_file", {value: async () => "patched"}); out.push("defined"); } catch (e) { out.push("define refused"); }
try { delete tools.read_file; out.push(typeof tools.read_file === "function" ? "delete ignored" : "deleted"); } catch (e) { out.push("delete refused"); }
try { Object.setPrototypeOf(tools, {evil: 1}); out.push("reprototyped"); } catch (e) { out.push("prototype refused"); }
// The runtime the runner itself uses, patched too.
JSON.stringify = () => "garbage";
JSON.parse = () => ({op: "call", id: 1, tool: "bash", args: {command: "touch pwned"}});
const r = await tools.read_file({path: "notes.txt"});
out.push(typeof r === "object" && r.content.includes("\tone") ? "read_file intact" : "patched result");
return out;""",
    "calls_100k": """
let ok = 0, limited = 0, other = 0;
const all = [];
for (let i = 0; i < 100000; i++) {
  all.push(tools["mcp_everything_echo"]({message: "x"}).then(() => ok++, (e) => (e.kind === "limited" ? limited++ : other++)));
}
await Promise.all(all);
return {ok, limited, other};""",
}


async def run(binary: str, socket: str, plain: str, strict: str) -> dict:
    seen: dict = {}
    async with AsyncExitStack() as stack:
        s = await stdio_session(stack, binary, socket, plain, "python-code-sdk")
        seen["listing"] = described((await s.list_tools()).tools)

        progress: list = []

        async def on_progress(p, total, message):
            progress.append(message)

        seen["main"] = outcome(await s.call_tool("run_code", {"code": MAIN}, progress_callback=on_progress))
        seen["progress"] = progress

        seen["cancel"] = await cancelled_mid_call(
            s.call_tool, socket, LONG, "mcp_everything_trigger-long-running-operation"
        )
        seen["after_cancel"] = outcome(await s.call_tool("run_code", {"code": "return 40 + 2;"}))

        # A program that never yields runs to its deadline while the other bad inputs and
        # a good program run beside it.
        bad: dict = {}
        order: list = []

        async def one(name: str, code: str) -> None:
            started = time.monotonic()
            r = await s.call_tool("run_code", {"code": code})
            bad[name] = outcome(r) | {"ms": int((time.monotonic() - started) * 1000)}
            order.append(name)

        async with anyio.create_task_group() as tg:
            tg.start_soon(one, "infinite_loop", "for (;;) {}")
            await in_flight(socket, "run_code")
            for name, code in BAD.items():
                await one(name, code)
            await one("well", 'return await tools["mcp_everything_get-sum"]({a: 1, b: 2});')
        seen["bad"] = bad
        seen["order"] = order
        seen["after_bad"] = outcome(await s.call_tool("run_code", {"code": "return 'still well';"}))

    asked: list = []

    async def elicit(context, params):
        asked.append(params.message)
        if "declined.txt" in params.message:
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content={})

    async with AsyncExitStack() as stack:
        s = await stdio_session(stack, binary, socket, strict, "python-code-strict", elicit)
        approved = await s.call_tool(
            "run_code",
            {"code": "const r = await tools.write_file({path: 'approved.txt', content: 'yes'}); console.log('after approval'); return r.path ?? 'written';"},
        )
        declined = await s.call_tool(
            "run_code",
            {"code": "try { await tools.write_file({path: 'declined.txt', content: 'no'}); return 'written'; } catch (e) { return `${e.name}:${e.kind}`; }"},
        )
        seen["strict"] = {"asked": asked, "approved": outcome(approved), "declined": outcome(declined)}
    return seen


async def era(socket: str) -> dict:
    seen: dict = {}
    info = types.Implementation(name="python-code-era", version="1")
    http = httpx2.AsyncClient(transport=httpx2.AsyncHTTPTransport(uds=socket), timeout=WAIT_S)
    async with http:
        transport = streamable_http_client("http://localhost/mcp", http_client=http)
        async with Client(transport, mode="2026-07-28", client_info=info) as client:
            seen["listing"] = described((await client.list_tools()).tools)
            progress: list = []

            async def on_progress(p, total, message):
                progress.append(message)

            seen["main"] = outcome(await client.call_tool("run_code", {"code": MAIN}, progress_callback=on_progress))
            seen["progress"] = progress
            seen["cancel"] = await cancelled_mid_call(
                client.call_tool, socket, LONG, "mcp_everything_trigger-long-running-operation"
            )
            seen["after_cancel"] = outcome(await client.call_tool("run_code", {"code": "return 40 + 2;"}))
    return seen


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    main = {"views": views, "run": run, "era": era}[mode]
    print(json.dumps(anyio.run(main, *args)))
