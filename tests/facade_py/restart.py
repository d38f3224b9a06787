"""A Python MCP SDK client over `toolhost mcp` that keeps calling through restarts of the
daemon, and prints what it saw as JSON.

Usage: restart.py TOOLHOST_BIN SOCKET DAEMON_PID SERVE_ARGV_JSON
The daemon (pid DAEMON_PID) is stopped with SIGTERM, then a new one is started with
SERVE_ARGV_JSON; that one is killed with SIGKILL and a third started; between each, the
client calls `bash` and waits for `notifications/tools/list_changed`. The last daemon is
stopped at the end.
"""

import json
import os
import signal
import subprocess
import sys
from contextlib import AsyncExitStack

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import get_default_environment, stdio_client
import mcp_types as types


async def main(binary: str, socket: str, pid: str, argv: str) -> dict:
    serve = json.loads(argv)
    seen: dict = {"calls": [], "list_changed": 0}
    changed = anyio.Event()

    async def on_message(message) -> None:
        nonlocal changed
        if isinstance(message, types.ToolListChangedNotification):
            seen["list_changed"] += 1
            changed.set()

    async def wait_gone(p: int) -> None:
        with anyio.fail_after(20):
            while True:
                # Our own child: gone when reaped. Its leader shows as a zombie while its
                # other threads still exit, holding its sockets open, so "Z" is not enough.
                try:
                    if os.waitpid(p, os.WNOHANG)[0] == p:
                        return
                    own = True
                except ChildProcessError:
                    own = False
                try:
                    with open(f"/proc/{p}/stat") as f:
                        # Another's child: a zombie whose threads are all gone is gone.
                        zombie = f.read().rsplit(")", 1)[1].split()[0] == "Z"
                    if zombie and not own and len(os.listdir(f"/proc/{p}/task")) <= 1:
                        return
                except FileNotFoundError:
                    return
                await anyio.sleep(0.05)

    params = StdioServerParameters(command=binary, args=["mcp", "--socket", socket], env=get_default_environment())
    daemon = None
    async with AsyncExitStack() as stack:
        read, write = await stack.enter_async_context(stdio_client(params))
        session = await stack.enter_async_context(
            ClientSession(read, write, client_info=types.Implementation(name="python-restart", version="1"), message_handler=on_message)
        )
        await session.initialize()

        async def call(label: str) -> None:
            r = await session.call_tool("bash", {"command": f"echo {label}"})
            seen["calls"].append([label, r.is_error, r.content[0].text.strip()])

        await call("before")
        for how, sig in (("sigterm", signal.SIGTERM), ("kill9", signal.SIGKILL)):
            changed = anyio.Event()
            target = int(pid) if daemon is None else daemon.pid
            os.kill(target, sig)
            await wait_gone(target)
            daemon = subprocess.Popen(serve, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            # The call waits for the new daemon; the list change comes once the bridge is back.
            await call(f"after-{how}")
            with anyio.fail_after(20):
                await changed.wait()
            tools = await session.list_tools()
            seen[f"tools-after-{how}"] = "bash" in [t.name for t in tools.tools]
    if daemon is not None:
        daemon.terminate()
        daemon.wait(20)
    return seen


if __name__ == "__main__":
    print(json.dumps(anyio.run(main, *sys.argv[1:5]), sort_keys=True))
