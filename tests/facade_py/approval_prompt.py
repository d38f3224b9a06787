"""Calls a tool that needs approval through the facade over stdio from an MCP client that
answers elicitation, in a strict host: the client is asked, records the question it saw
and accepts. Prints the questions and the call's outcome as JSON.

Usage: approval_prompt.py TOOLHOST_BIN SOCKET TOOL ARGS_JSON
"""

import json
import sys
from contextlib import AsyncExitStack

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import get_default_environment, stdio_client
import mcp_types as types


async def main() -> None:
    toolhost, socket, tool, args = sys.argv[1:5]
    asked: list = []

    async def elicit(context, params):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={})

    async with AsyncExitStack() as stack:
        params = StdioServerParameters(
            command=toolhost, args=["mcp", "--socket", socket], env=get_default_environment()
        )
        read, write = await stack.enter_async_context(stdio_client(params))
        session = await stack.enter_async_context(
            ClientSession(
                read,
                write,
                client_info=types.Implementation(name="python-approval-prompt", version="1"),
                elicitation_callback=elicit,
            )
        )
        await session.initialize()
        r = await session.call_tool(tool, json.loads(args))
        text = "\n".join(c.text for c in r.content if getattr(c, "text", None) is not None)
        print(json.dumps({"asked": asked, "is_error": bool(r.is_error), "text": text}))


anyio.run(main)
