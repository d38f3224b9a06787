"""Drives toolhost's MCP facade with the Python MCP SDK and prints what it saw as JSON.

Usage: client.py stdio TOOLHOST_BIN SOCKET | client.py http URL TOKEN
"""

import json
import os
import sys
from contextlib import AsyncExitStack

import anyio
import httpx2
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import get_default_environment, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
import mcp_types as types


async def main() -> None:
    mode = sys.argv[1]
    seen: dict = {"progress": []}
    async with AsyncExitStack() as stack:
        if mode == "stdio":
            env = get_default_environment()
            if "TOOLHOST_MCP_PAGE_SIZE" in os.environ:
                env["TOOLHOST_MCP_PAGE_SIZE"] = os.environ["TOOLHOST_MCP_PAGE_SIZE"]
            params = StdioServerParameters(command=sys.argv[2], args=["mcp", "--socket", sys.argv[3]], env=env)
            read, write = await stack.enter_async_context(stdio_client(params))
        else:
            http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {sys.argv[3]}"})
            await stack.enter_async_context(http)
            streams = await stack.enter_async_context(streamable_http_client(sys.argv[2], http_client=http))
            read, write = streams[0], streams[1]

        session = await stack.enter_async_context(
            ClientSession(read, write, client_info=types.Implementation(name=f"python-{mode}", version="1"))
        )
        init = await session.initialize()
        seen["server"] = init.server_info.name
        seen["protocol"] = init.protocol_version

        names, pages, cursor = [], 0, None
        while True:
            page = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
            pages += 1
            names += [t.name for t in page.tools]
            if not page.next_cursor:
                break
            cursor = page.next_cursor
        seen["tools"] = sorted(names)
        seen["pages"] = pages

        r = await session.call_tool("bash", {"command": "echo hi"})
        seen["bash"] = {"is_error": r.is_error, "first": r.content[0].text}

        async def progress(p: float, total: float | None, message: str | None) -> None:
            seen["progress"].append([p, total, message])

        r = await session.call_tool("pic", {}, progress_callback=progress)
        seen["pic"] = {
            "is_error": r.is_error,
            "content": [c.model_dump(exclude_none=True, by_alias=True) for c in r.content],
            "structured": r.structured_content,
        }

        r = await session.call_tool("read_file", {"path": "missing.txt"})
        seen["error"] = r.is_error

        try:
            await session.call_tool("nope", {})
            seen["unknown"] = None
        except MCPError as e:
            seen["unknown"] = e.error.code
    print(json.dumps(seen, sort_keys=True))


anyio.run(main)
