"""Runs a code-mode program through `toolhost mcp` (stdio) with the Python MCP SDK and
prints what it saw as JSON.

Usage: code_mode.py TOOLHOST_BIN SOCKET
"""

import json
import sys
from contextlib import AsyncExitStack

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import get_default_environment, stdio_client
import mcp_types as types


PROGRAM = """
const sum = await tools.mcp_fx_add({a: 2, b: 3});
console.log("sum", JSON.stringify(sum).includes("5") ? 5 : sum);
const echoed = await tools.mcp_fx_echo({text: "py"});
return {echoed};
"""


def texts(result) -> str:
    parts = [c.text for c in result.content if isinstance(c, types.TextContent)]
    if result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, separators=(",", ":")))
    return "\n".join(parts)


async def main(binary: str, socket: str) -> None:
    async with AsyncExitStack() as stack:
        params = StdioServerParameters(command=binary, args=["mcp", "--socket", socket], env=get_default_environment())
        read, write = await stack.enter_async_context(stdio_client(params))
        session = await stack.enter_async_context(
            ClientSession(read, write, client_info=types.Implementation(name="python-code", version="1"))
        )
        await session.initialize()
        listed = await session.list_tools()
        names = [t.name for t in listed.tools]
        ok = await session.call_tool("run_code", {"code": PROGRAM})
        failed = await session.call_tool("run_code", {"code": "await tools.mcp_fx_fail({message: 'x'});"})
        print(json.dumps({
            "listed": "run_code" in names,
            "is_error": ok.is_error,
            "text": texts(ok),
            "error_is_error": failed.is_error,
        }))


anyio.run(main, sys.argv[1], sys.argv[2])
