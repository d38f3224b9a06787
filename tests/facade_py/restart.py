"""A Python MCP SDK client over `toolhost mcp` that keeps calling through restarts of the
daemon, and prints what it saw as JSON.

Usage: restart.py MODE TOOLHOST_BIN SOCKET DAEMON_PID SERVE_ARGV_JSON MARKER
MODE is "legacy" (2025-11-25: initialize) or a new-era version such as 2026-07-28 (no
initialize; changes heard through `subscriptions/listen`).
The daemon (pid DAEMON_PID) is stopped with SIGTERM while a call runs (`touch MARKER;
sleep 60`): how that call ends, and how long after the signal, is recorded; a new daemon is
started with SERVE_ARGV_JSON, the client calls `bash` and waits to hear that the tools may
have changed. The same again with SIGKILL. The last daemon is stopped at the end.
"""

import json
import os
import signal
import subprocess
import sys
import time

import anyio
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters, get_default_environment
from mcp.shared.subscriptions import ToolsListChanged
import mcp_types as types
from restarts import text, wait_gone


async def main(mode: str, binary: str, socket: str, pid: str, argv: str, marker: str) -> dict:
    serve = json.loads(argv)
    seen: dict = {"calls": [], "list_changed": 0}
    changed = anyio.Event()

    def heard() -> None:
        seen["list_changed"] += 1
        changed.set()

    async def on_message(message) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            heard()

    params = StdioServerParameters(command=binary, args=["mcp", "--socket", socket], env=get_default_environment())
    info = types.Implementation(name="python-restart", version="1")
    daemon = None
    async with Client(params, mode=mode, client_info=info, message_handler=on_message) as client:

        async def call(label: str) -> None:
            r = await client.call_tool("bash", {"command": f"echo {label}"})
            seen["calls"].append([label, r.is_error, text(r).strip()])

        async with anyio.create_task_group() as listening:
            if mode != "legacy":
                # A new-era client hears of changes on its `subscriptions/listen` stream,
                # which the bridge keeps open through the daemon's restarts.
                acked = anyio.Event()

                async def listen() -> None:
                    async with client.listen(tools_list_changed=True) as sub:
                        acked.set()
                        async for event in sub:
                            if isinstance(event, ToolsListChanged):
                                heard()

                listening.start_soon(listen)
                with anyio.fail_after(20):
                    await acked.wait()

            await call("before")
            for how, sig in (("sigterm", signal.SIGTERM), ("kill9", signal.SIGKILL)):
                changed = anyio.Event()
                target = int(pid) if daemon is None else daemon.pid
                inflight: dict = {}

                async def long_call() -> None:
                    start = time.monotonic()
                    try:
                        r = await client.call_tool("bash", {"command": f"touch {marker}; sleep 60"})
                        inflight["is_error"] = r.is_error
                        inflight["text"] = text(r)
                    except Exception as e:  # the SDK's error for a request that failed
                        inflight["exception"] = f"{type(e).__name__}: {e}"
                    inflight["seconds"] = time.monotonic() - start

                if os.path.exists(marker):
                    os.unlink(marker)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(long_call)
                    with anyio.fail_after(20):
                        while not os.path.exists(marker):
                            await anyio.sleep(0.05)
                    stopped_at = time.monotonic()
                    os.kill(target, sig)
                    # Nothing hangs: the call ends (well before its own 60 s).
                    with anyio.fail_after(50):
                        while "seconds" not in inflight:
                            await anyio.sleep(0.05)
                    inflight["after_stop"] = time.monotonic() - stopped_at
                seen[f"inflight-{how}"] = inflight
                await wait_gone(target)
                daemon = subprocess.Popen(serve, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                # The call waits for the new daemon; the list change comes once the bridge is back.
                await call(f"after-{how}")
                with anyio.fail_after(20):
                    await changed.wait()
                tools = await client.list_tools()
                seen[f"tools-after-{how}"] = "bash" in [t.name for t in tools.tools]
            listening.cancel_scope.cancel()
    if daemon is not None:
        daemon.terminate()
        daemon.wait(20)
    return seen


if __name__ == "__main__":
    print(json.dumps(anyio.run(main, *sys.argv[1:7]), sort_keys=True))
