"""Drives toolhost's MCP facade with the Python MCP SDK and prints what it saw as JSON.

Usage: client.py stdio TOOLHOST_BIN SOCKET | client.py http URL TOKEN
       client.py surface stdio TOOLHOST_BIN SOCKET | client.py surface http URL TOKEN
       client.py mrtr TOOLHOST_BIN SOCKET
       client.py ask TOOLHOST_BIN SOCKET TOOL CALLS_JSON
       client.py asked MODE TOOLHOST_BIN SOCKET
(`surface`: prompts, resources, templates, completion and a resource subscription of a
host whose MCP server is server-everything, named `everything`, with its simulated resource
updates turned on.)
(`mrtr`: the SDK's `Client` pinned to 2026-07-28 calls `mcp_fx_ask_user` over stdio and over
HTTP on the daemon's Unix socket; its elicitation callback answers the `input_required`
rounds, which the SDK drives itself.)
(`ask`: calls TOOL over stdio once per arguments object in CALLS_JSON, answering each
elicitation from its schema: a boolean `true`, an enum its last option, a string "Py".)
(`asked`: the SDK's `Client` in MODE (`legacy` or `2026-07-28`) gets the prompt
`mcp_fx_asked`, reads `fixture://asked` and calls `mcp_fx_ask_all`, over stdio and over HTTP
on the daemon's Unix socket; its callbacks answer elicitation with the name "Py" and
sampling with "hi", however the facade asks.)
"""

import base64
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


async def connect(stack: AsyncExitStack, mode: str, a: str, b: str, **kwargs) -> ClientSession:
    if mode == "stdio":
        env = get_default_environment()
        if "TOOLHOST_MCP_PAGE_SIZE" in os.environ:
            env["TOOLHOST_MCP_PAGE_SIZE"] = os.environ["TOOLHOST_MCP_PAGE_SIZE"]
        params = StdioServerParameters(command=a, args=["mcp", "--socket", b], env=env)
        read, write = await stack.enter_async_context(stdio_client(params))
    else:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {b}"})
        await stack.enter_async_context(http)
        streams = await stack.enter_async_context(streamable_http_client(a, http_client=http))
        read, write = streams[0], streams[1]
    return await stack.enter_async_context(
        ClientSession(read, write, client_info=types.Implementation(name=f"python-{mode}", version="1"), **kwargs)
    )


async def error_code(call) -> int | None:
    try:
        await call
        return None
    except MCPError as e:
        return e.error.code


async def surface(mode: str, a: str, b: str) -> dict:
    seen: dict = {}
    updated = anyio.Event()

    async def on_message(message) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            seen["updated"] = message.params.uri
            updated.set()

    async with AsyncExitStack() as stack:
        session = await connect(stack, mode, a, b, message_handler=on_message)
        init = await session.initialize()
        caps = init.capabilities
        seen["capabilities"] = {
            "prompts": caps.prompts is not None and caps.prompts.list_changed,
            "resources": caps.resources is not None and caps.resources.subscribe,
            "completions": caps.completions is not None,
        }
        prompts, pages, cursor = [], 0, None
        while True:
            page = await session.list_prompts(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
            pages += 1
            prompts += [p.name for p in page.prompts]
            cursor = page.next_cursor
            if not cursor:
                break
        seen["prompts"] = sorted(prompts)
        seen["prompt_pages"] = pages
        r = await session.get_prompt("mcp_everything_args-prompt", {"city": "Paris"})
        seen["args_prompt"] = [m.content.text for m in r.messages]
        seen["missing_argument"] = await error_code(session.get_prompt("mcp_everything_args-prompt", {}))
        r = await session.get_prompt("mcp_everything_resource-prompt", {"resourceType": "Blob", "resourceId": "2"})
        seen["embedded"] = [m.content.model_dump(exclude_none=True, by_alias=True)["type"] for m in r.messages]
        resources, cursor = [], None
        while True:
            page = await session.list_resources(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
            resources += [r.uri for r in page.resources]
            cursor = page.next_cursor
            if not cursor:
                break
        seen["static_resources"] = len([u for u in resources if u.startswith("demo://resource/static/")]) > 0
        templates = await session.list_resource_templates()
        seen["templates"] = sorted(t.uri_template for t in templates.resource_templates)
        r = await session.read_resource("demo://resource/dynamic/blob/3")
        seen["blob"] = base64.b64decode(r.contents[0].blob).decode().split(":")[0]
        seen["not_found"] = await error_code(session.read_resource("nothing://here"))
        r = await session.complete(types.PromptReference(name="mcp_everything_completable-prompt"), {"name": "department", "value": "Eng"})
        seen["completion"] = r.completion.values
        r = await session.complete(
            types.PromptReference(name="mcp_everything_completable-prompt"),
            {"name": "name", "value": ""},
            context_arguments={"department": "Sales"},
        )
        seen["completion_in_context"] = r.completion.values
        # The caller has turned server-everything's updates on (one every 5 s).
        await session.subscribe_resource("demo://resource/dynamic/text/1")
        with anyio.fail_after(20):
            await updated.wait()
        await session.unsubscribe_resource("demo://resource/dynamic/text/1")
    return seen


async def mrtr(binary: str, socket: str) -> dict:
    from mcp.client.client import Client

    seen: dict = {"asked": []}

    async def elicit(context, params):
        seen["asked"].append(params.message)
        return types.ElicitResult(action="accept", content={"name": "Py"})

    info = types.Implementation(name="python-mrtr", version="1")
    stdio = StdioServerParameters(command=binary, args=["mcp", "--socket", socket], env=get_default_environment())
    http = httpx2.AsyncClient(transport=httpx2.AsyncHTTPTransport(uds=socket))
    async with http:
        transports = {"stdio": stdio, "http": streamable_http_client("http://localhost/mcp", http_client=http)}
        for name, transport in transports.items():
            async with Client(transport, mode="2026-07-28", client_info=info, elicitation_callback=elicit) as client:
                result = await client.call_tool("mcp_fx_ask_user", {"message": f"name over {name}?"})
                texts = [c.text for c in result.content if isinstance(c, types.TextContent)]
                seen[name] = {"is_error": result.is_error, "text": "".join(texts)}
    return seen


async def asked(mode: str, binary: str, socket: str) -> dict:
    from mcp.client.client import Client

    seen: dict = {"asked": []}

    async def elicit(context, params):
        seen["asked"].append(params.message)
        return types.ElicitResult(action="accept", content={"name": "Py"})

    async def sample(context, params):
        seen["asked"].append("sampling")
        text = types.TextContent(type="text", text="hi")
        return types.CreateMessageResult(role="assistant", content=text, model="py")

    info = types.Implementation(name=f"python-asked-{mode}", version="1")
    stdio = StdioServerParameters(command=binary, args=["mcp", "--socket", socket], env=get_default_environment())
    http = httpx2.AsyncClient(transport=httpx2.AsyncHTTPTransport(uds=socket))
    async with http:
        transports = {"stdio": stdio, "http": streamable_http_client("http://localhost/mcp", http_client=http)}
        for name, transport in transports.items():
            async with Client(transport, mode=mode, client_info=info, elicitation_callback=elicit,
                              sampling_callback=sample) as client:
                prompt = await client.get_prompt("mcp_fx_asked")
                resource = await client.read_resource("fixture://asked")
                tool = await client.call_tool("mcp_fx_ask_all", {})
                seen[name] = {
                    "prompt": prompt.messages[0].content.text,
                    "resource": resource.contents[0].text,
                    "tool": "".join(c.text for c in tool.content if isinstance(c, types.TextContent)),
                    "tool_error": tool.is_error,
                }
    return seen


async def ask(binary: str, socket: str, tool: str, calls: str) -> dict:
    seen: dict = {"asked": [], "results": []}

    async def elicit(context, params):
        schema = params.requested_schema
        seen["asked"].append({"message": params.message, "schema": schema})
        content = {}
        for name, prop in schema["properties"].items():
            if "enum" in prop:
                content[name] = prop["enum"][-1]
            elif prop.get("type") == "boolean":
                content[name] = True
            else:
                content[name] = "Py"
        return types.ElicitResult(action="accept", content=content)

    async with AsyncExitStack() as stack:
        session = await connect(stack, "stdio", binary, socket, elicitation_callback=elicit)
        await session.initialize()
        for args in json.loads(calls):
            r = await session.call_tool(tool, args)
            seen["results"].append({"is_error": r.is_error, "structured": r.structured_content})
    return seen


async def main() -> None:
    if sys.argv[1] == "ask":
        print(json.dumps(await ask(*sys.argv[2:6])))
        return
    if sys.argv[1] == "asked":
        print(json.dumps(await asked(*sys.argv[2:5])))
        return
    if sys.argv[1] == "mrtr":
        print(json.dumps(await mrtr(*sys.argv[2:4])))
        return
    if sys.argv[1] == "surface":
        print(json.dumps(await surface(*sys.argv[2:5]), sort_keys=True))
        return
    mode = sys.argv[1]
    seen: dict = {"progress": []}
    async with AsyncExitStack() as stack:
        session = await connect(stack, mode, sys.argv[2], sys.argv[3])
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
