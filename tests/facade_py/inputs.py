"""Drives the facade's relay of server-to-client requests, progress and logging with the
Python MCP SDK over stdio, and prints what it saw as JSON.

Usage: inputs.py TOOLHOST_BIN SOCKET ROOT_DIR with|without
  with:    the client declares elicitation, sampling and roots (ROOT_DIR is its root)
  without: the client declares none of them
"""

import json
import pathlib
import sys
from contextlib import AsyncExitStack

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import get_default_environment, stdio_client
from mcp.shared.exceptions import MCPError
import mcp_types as types


def texts(r) -> str:
    return "\n".join(c.text for c in r.content if getattr(c, "text", None) is not None)


async def main() -> None:
    toolhost, socket, root, mode = sys.argv[1:5]
    seen: dict = {"asked": [], "progress": [], "logs": []}

    async def elicit(context, params):
        seen["asked"].append("elicitation")
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    async def sample(context, params):
        seen["asked"].append("sampling")
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="hi from python"),
            model="python-model",
        )

    async def roots(context):
        seen["asked"].append("roots")
        return types.ListRootsResult(roots=[types.Root(uri=pathlib.Path(root).as_uri())])

    async def log(params):
        seen["logs"].append(params.data)

    callbacks = (
        {"elicitation_callback": elicit, "sampling_callback": sample, "list_roots_callback": roots}
        if mode == "with"
        else {}
    )
    async with AsyncExitStack() as stack:
        params = StdioServerParameters(
            command=toolhost, args=["mcp", "--socket", socket], env=get_default_environment()
        )
        read, write = await stack.enter_async_context(stdio_client(params))
        session = await stack.enter_async_context(
            ClientSession(
                read,
                write,
                client_info=types.Implementation(name=f"python-inputs-{mode}", version="1"),
                logging_callback=log,
                **callbacks,
            )
        )
        await session.initialize()

        async def call(name: str, args: dict, **kw) -> dict:
            try:
                r = await session.call_tool(name, args, **kw)
                return {"is_error": bool(r.is_error), "text": texts(r)}
            except MCPError as e:
                return {"error": e.error.code, "text": e.error.message}

        seen["elicitation"] = await call("mcp_everything_trigger-elicitation-request", {})
        seen["sampling"] = await call("mcp_everything_trigger-sampling-request", {"prompt": "hello"})
        seen["roots"] = await call("mcp_fx_ask_roots", {})

        async def progress(p: float, total: float | None, message: str | None) -> None:
            seen["progress"].append(p)

        seen["long"] = await call(
            "mcp_everything_trigger-long-running-operation",
            {"duration": 1, "steps": 4},
            progress_callback=progress,
        )
        seen["notes"] = await call("mcp_fx_notes_then_result", {"steps": 2})
    print(json.dumps(seen, sort_keys=True))


anyio.run(main)
