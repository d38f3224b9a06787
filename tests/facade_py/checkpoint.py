"""Writes a file with `write_file` through the facade over stdio, as a Python MCP SDK
client named `python-undo`. Prints the call's outcome as JSON.

Usage: checkpoint.py TOOLHOST_BIN SOCKET PATH CONTENT
"""

import json
import sys
from contextlib import AsyncExitStack

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import get_default_environment, stdio_client
import mcp_types as types


async def main() -> None:
    toolhost, socket, path, content = sys.argv[1:5]
    async with AsyncExitStack() as stack:
        params = StdioServerParameters(
            command=toolhost, args=["mcp", "--socket", socket], env=get_default_environment()
        )
        read, write = await stack.enter_async_context(stdio_client(params))
        session = await stack.enter_async_context(
            ClientSession(
                read, write, client_info=types.Implementation(name="python-undo", version="1")
            )
        )
        await session.initialize()
        r = await session.call_tool("write_file", {"path": path, "content": content})
        text = "\n".join(c.text for c in r.content if getattr(c, "text", None) is not None)
        print(json.dumps({"is_error": bool(r.is_error), "text": text}))


anyio.run(main)
