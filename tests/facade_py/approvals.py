"""Calls `bash` through the facade over stdio from an MCP client without elicitation, in a
strict host: the call waits in the approval queue until an operator decides it. Prints the
call's outcome as JSON.

Usage: approvals.py TOOLHOST_BIN SOCKET
"""

import json
import sys
from contextlib import AsyncExitStack

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import get_default_environment, stdio_client
import mcp_types as types


async def main() -> None:
    toolhost, socket = sys.argv[1:3]
    async with AsyncExitStack() as stack:
        params = StdioServerParameters(
            command=toolhost, args=["mcp", "--socket", socket], env=get_default_environment()
        )
        read, write = await stack.enter_async_context(stdio_client(params))
        session = await stack.enter_async_context(
            ClientSession(
                read, write, client_info=types.Implementation(name="python-approvals", version="1")
            )
        )
        await session.initialize()
        r = await session.call_tool("bash", {"command": "touch ran"})
        text = "\n".join(c.text for c in r.content if getattr(c, "text", None) is not None)
        print(json.dumps({"is_error": bool(r.is_error), "text": text}))


anyio.run(main)
