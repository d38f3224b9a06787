"""One Python MCP SDK session over `toolhost mcp` (stdio), as the client `python-undo-mcp`,
driven line by line: each line read on stdin is one step as JSON, and one JSON line is
printed for it. The test interleaves the session's steps with other frontends' calls.

Steps:
  {"op": "tools"}                           -> {"tools": [{"name", "read_only"}, ...]}
  {"op": "call", "name": N, "args": {...}}  -> {"is_error", "text", "structured"}
  {"op": "prompts"}                         -> {"prompts": [names]}
  {"op": "prompt", "name": N}               -> {"text": [message texts]}
  {"op": "quit"}                            -> ends

Usage: checkpoint_driver.py TOOLHOST_BIN SOCKET
"""

import json
import sys
from contextlib import AsyncExitStack

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import get_default_environment, stdio_client
import mcp_types as types


async def step(session: ClientSession, s: dict) -> dict:
    op = s["op"]
    if op == "tools":
        listed = await session.list_tools()
        return {
            "tools": [
                {"name": t.name, "read_only": bool(t.annotations and t.annotations.read_only_hint)}
                for t in listed.tools
            ]
        }
    if op == "call":
        r = await session.call_tool(s["name"], s.get("args", {}))
        text = "\n".join(c.text for c in r.content if getattr(c, "text", None) is not None)
        return {"is_error": bool(r.is_error), "text": text, "structured": r.structured_content}
    if op == "prompts":
        listed = await session.list_prompts()
        return {"prompts": [p.name for p in listed.prompts]}
    if op == "prompt":
        r = await session.get_prompt(s["name"], {})
        return {"text": [m.content.text for m in r.messages]}
    raise ValueError(f"unknown op {op}")


async def main() -> None:
    toolhost, socket = sys.argv[1:3]
    async with AsyncExitStack() as stack:
        params = StdioServerParameters(
            command=toolhost, args=["mcp", "--socket", socket], env=get_default_environment()
        )
        read, write = await stack.enter_async_context(stdio_client(params))
        session = await stack.enter_async_context(
            ClientSession(
                read, write, client_info=types.Implementation(name="python-undo-mcp", version="1")
            )
        )
        await session.initialize()
        print(json.dumps({"ready": True}), flush=True)
        while True:
            line = await anyio.to_thread.run_sync(sys.stdin.readline)
            if not line:
                return
            s = json.loads(line)
            if s["op"] == "quit":
                return
            try:
                out = await step(session, s)
            except Exception as e:  # the test sees the failure as data
                out = {"exception": repr(e)}
            print(json.dumps(out), flush=True)


anyio.run(main)
