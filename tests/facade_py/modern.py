"""Drives toolhost's MCP facade with the Python MCP SDK's `Client` in a pinned mode and
prints what it saw as JSON: the tool names over stdio, and the text of the `alpha` tool's
result over stdio and over HTTP (`/mcp` on the daemon's Unix socket).

Usage: modern.py MODE TOOLHOST_BIN SOCKET   (MODE: a protocol version such as 2026-07-28,
which adopts it with no probe and no initialize, or "legacy")
"""

import json
import sys

import anyio
import httpx2
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters, get_default_environment
from mcp.client.streamable_http import streamable_http_client
import mcp_types as types


def text(result) -> str:
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def main(mode: str, binary: str, socket: str) -> dict:
    seen: dict = {}
    info = types.Implementation(name="python-modern", version="1")
    stdio = StdioServerParameters(command=binary, args=["mcp", "--socket", socket], env=get_default_environment())
    async with Client(stdio, mode=mode, client_info=info) as client:
        tools = await client.list_tools()
        seen["tools"] = [t.name for t in tools.tools]
        seen["alpha"] = text(await client.call_tool("alpha", {}))
    http = httpx2.AsyncClient(transport=httpx2.AsyncHTTPTransport(uds=socket))
    async with http:
        transport = streamable_http_client("http://localhost/mcp", http_client=http)
        async with Client(transport, mode=mode, client_info=info) as client:
            seen["http_alpha"] = text(await client.call_tool("alpha", {}))
    return seen


if __name__ == "__main__":
    print(json.dumps(anyio.run(main, *sys.argv[1:4])))
