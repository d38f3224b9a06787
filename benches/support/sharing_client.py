"""One frontend of the sharing benchmark (benches/sharing.rs): a real MCP client, the
official Python SDK's ClientSession, the way an editor or an agent session uses it.

Usage:
  sharing_client.py host TOOLHOST_BIN SOCKET CALLS_JSON
      one stdio connection to `toolhost mcp`; CALLS_JSON is [[tool, arguments], ...] with
      the tool names the host lists
  sharing_client.py direct SERVERS_JSON
      spawns every server itself (stdio_client), as frontends do today; SERVERS_JSON is
      [{"command", "args", "env", "tool", "arguments"}, ...]

Either way: initialize, list the tools, call each tool once (all must succeed), print one
JSON line ({"tools": how many were listed}), then stay connected until stdin closes, so the
benchmark measures the processes while every frontend is connected.
"""

import json
import os
import sys
from contextlib import AsyncExitStack

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import get_default_environment, stdio_client


async def open_session(stack: AsyncExitStack, command: str, args: list, env: dict) -> ClientSession:
    full_env = get_default_environment() | env
    params = StdioServerParameters(command=command, args=args, env=full_env)
    # The servers' start-up chatter on stderr would bury the benchmark's table.
    errlog = stack.enter_context(open(os.devnull, "w"))
    read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog))
    return await stack.enter_async_context(ClientSession(read, write))


async def call_ok(session: ClientSession, tool: str, arguments: dict) -> None:
    r = await session.call_tool(tool, arguments)
    if r.is_error:
        raise SystemExit(f"{tool} failed: {r.content}")


async def list_all(session: ClientSession) -> int:
    count, cursor = 0, None
    while True:
        page = await session.list_tools(cursor=cursor) if cursor else await session.list_tools()
        count += len(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return count


async def host(binary: str, socket: str, calls: list) -> int:
    async with AsyncExitStack() as stack:
        session = await open_session(stack, binary, ["mcp", "--socket", socket], {})
        await session.initialize()
        listed = await list_all(session)
        for tool, arguments in calls:
            await call_ok(session, tool, arguments)
        report(listed)
        await wait_for_stdin_eof()
    return 0


async def direct(servers: list) -> int:
    async with AsyncExitStack() as stack:
        sessions = [await open_session(stack, s["command"], s["args"], s.get("env", {})) for s in servers]
        listed = [0] * len(sessions)

        async def start(i: int, session: ClientSession) -> None:
            await session.initialize()
            listed[i] = await list_all(session)
            await call_ok(session, servers[i]["tool"], servers[i]["arguments"])

        async with anyio.create_task_group() as tg:
            for i, session in enumerate(sessions):
                tg.start_soon(start, i, session)
        report(sum(listed))
        await wait_for_stdin_eof()
    return 0


def report(listed: int) -> None:
    print(json.dumps({"tools": listed}), flush=True)


async def wait_for_stdin_eof() -> None:
    await anyio.to_thread.run_sync(sys.stdin.read)


async def main() -> int:
    if sys.argv[1] == "host":
        return await host(sys.argv[2], sys.argv[3], json.loads(sys.argv[4]))
    return await direct(json.loads(sys.argv[2]))


sys.exit(anyio.run(main))
