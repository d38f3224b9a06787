"""Drives toolhost's MCP facade over stdio with the Python MCP SDK's `ClientSession` and
prints what it saw of the host's skills as JSON: the skill:// resources listed, SKILL.md
read back, `load_skill` called, and `notifications/resources/list_changed` after a skill
is added to SKILLS_DIR (the list read again then).

Usage: skills.py TOOLHOST_BIN SOCKET SKILLS_DIR
"""

import json
import os
import sys
from contextlib import AsyncExitStack

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import get_default_environment, stdio_client
import mcp_types as types


async def skill_uris(session: ClientSession) -> list:
    listed = await session.list_resources()
    return sorted(
        [str(r.uri), r.name, r.description, r.mime_type]
        for r in listed.resources
        if str(r.uri).startswith("skill://")
    )


async def main(binary: str, socket: str, skills_dir: str) -> dict:
    seen: dict = {}
    changed = anyio.Event()

    async def on_message(message) -> None:
        if isinstance(message, types.ResourceListChangedNotification):
            changed.set()

    async with AsyncExitStack() as stack:
        params = StdioServerParameters(command=binary, args=["mcp", "--socket", socket], env=get_default_environment())
        read, write = await stack.enter_async_context(stdio_client(params))
        info = types.Implementation(name="python-skills", version="1")
        session = await stack.enter_async_context(
            ClientSession(read, write, client_info=info, message_handler=on_message)
        )
        init = await session.initialize()
        resources = init.capabilities.resources
        seen["list_changed"] = resources is not None and resources.list_changed
        seen["resources"] = await skill_uris(session)
        read_back = await session.read_resource("skill://pdf/SKILL.md")
        seen["read"] = [[str(c.uri), c.mime_type, c.text] for c in read_back.contents]
        script = await session.read_resource("skill://pdf/scripts/fill.py")
        seen["script"] = script.contents[0].text
        r = await session.call_tool("load_skill", {"name": "pdf"})
        seen["load_skill"] = {"is_error": r.is_error, "text": r.content[0].text}

        folder = os.path.join(skills_dir, "added")
        os.makedirs(folder)
        with open(os.path.join(folder, ".tmp"), "w") as f:
            f.write("---\nname: added\ndescription: Added while connected.\n---\nNew.\n")
        os.rename(os.path.join(folder, ".tmp"), os.path.join(folder, "SKILL.md"))
        with anyio.fail_after(20):
            await changed.wait()
        seen["after"] = [u[0] for u in await skill_uris(session)]
    return seen


if __name__ == "__main__":
    print(json.dumps(anyio.run(main, *sys.argv[1:4]), sort_keys=True))
