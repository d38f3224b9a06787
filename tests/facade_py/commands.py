"""Drives toolhost's slash commands through the MCP facade (stdio) with the Python MCP SDK
and prints what it saw as JSON.

Usage: commands.py TOOLHOST_BIN SOCKET COMMANDS_DIR
(The host serves the fixture server `fx`, whose prompt is `mcp_fx_greet`, and the commands
the test wrote: `review/pr.md` with arguments `pr` (required) and `level` (choices), and
`echo.md`, free text. The script then writes `COMMANDS_DIR/late.md` itself and waits for
`notifications/prompts/list_changed`.)
"""

import json
import os
import sys
from contextlib import AsyncExitStack

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import get_default_environment, stdio_client
from mcp.shared.exceptions import MCPError
import mcp_types as types


async def error(call) -> dict | None:
    try:
        await call
        return None
    except MCPError as e:
        return {"code": e.error.code, "message": e.error.message}


async def all_prompts(session: ClientSession) -> list:
    prompts, cursor = [], None
    while True:
        page = await session.list_prompts(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
        prompts += page.prompts
        cursor = page.next_cursor
        if not cursor:
            return prompts


def text(result) -> list:
    return [m.content.text for m in result.messages]


async def main(binary: str, socket: str, commands_dir: str) -> dict:
    seen: dict = {}
    changed = anyio.Event()

    async def on_message(message) -> None:
        if isinstance(message, types.PromptListChangedNotification):
            changed.set()

    params = StdioServerParameters(command=binary, args=["mcp", "--socket", socket], env=get_default_environment())
    async with AsyncExitStack() as stack:
        read, write = await stack.enter_async_context(stdio_client(params))
        session = await stack.enter_async_context(
            ClientSession(read, write, client_info=types.Implementation(name="python-commands", version="1"), message_handler=on_message)
        )
        await session.initialize()
        prompts = await all_prompts(session)
        seen["prompts"] = [p.name for p in prompts]
        review = next(p for p in prompts if p.name == "review_pr")
        seen["review_pr"] = {
            "title": review.title,
            "description": review.description,
            "arguments": [[a.name, bool(a.required)] for a in review.arguments or []],
        }
        r = await session.get_prompt("review_pr", {"pr": "123", "level": "high"})
        seen["expanded"] = text(r)
        seen["roles"] = [m.role for m in r.messages]
        r = await session.get_prompt("echo", {"arguments": "one two three"})
        seen["free_text"] = text(r)
        seen["missing"] = await error(session.get_prompt("review_pr", {"level": "low"}))
        seen["not_a_choice"] = await error(session.get_prompt("review_pr", {"pr": "1", "level": "extreme"}))
        r = await session.complete(types.PromptReference(name="review_pr"), {"name": "level", "value": "h"})
        seen["completion"] = r.completion.values
        r = await session.complete(types.PromptReference(name="review_pr"), {"name": "level", "value": ""})
        seen["completion_all"] = r.completion.values
        r = await session.get_prompt("mcp_status", {})
        seen["mcp_status"] = text(r)
        r = await session.get_prompt("mcp_fx_greet", {"name": "Ada"})
        seen["upstream"] = r.messages[0].content.text

        with open(f"{commands_dir}/late.md.tmp", "w") as f:
            f.write("---\ndescription: Added while connected.\n---\nLate.\n")
        os.rename(f"{commands_dir}/late.md.tmp", f"{commands_dir}/late.md")
        with anyio.fail_after(20):
            await changed.wait()
        seen["after_add"] = "late" in [p.name for p in await all_prompts(session)]
    return seen


if __name__ == "__main__":
    print(json.dumps(anyio.run(main, *sys.argv[1:4]), sort_keys=True))
