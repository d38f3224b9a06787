"""A Python MCP SDK client over HTTP (`/mcp` on the daemon's Unix socket) that keeps calling
through restarts of the daemon, and prints what it saw as JSON.

Usage: http_restart.py MODE TOOLHOST_BIN SOCKET DAEMON_PID SERVE_ARGV_JSON MARKER
MODE is "legacy" (2025-11-25: initialize, Mcp-Session-Id) or a new-era version (stateless).
A call is in flight (`touch MARKER; sleep 60`) when the daemon (pid DAEMON_PID) gets
SIGTERM: how long until that call ends, and how, is recorded; a new daemon is started with
SERVE_ARGV_JSON and called. The same again with SIGKILL (a new-era client: with no call in
flight, see below). The session ids the client sent are recorded (one id throughout: the
session was taken up).
"""

import json
import os
import signal
import subprocess
import sys
import time

import anyio
import httpx2
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
import mcp_types as types
from restarts import text, wait_gone


async def wait_ready(socket_path: str) -> None:
    """Until a daemon accepts connections on the socket again."""
    import socket as s

    with anyio.fail_after(30):
        while True:
            c = s.socket(s.AF_UNIX, s.SOCK_STREAM)
            try:
                c.connect(socket_path)
                return
            except OSError:
                await anyio.sleep(0.05)
            finally:
                c.close()


async def main(mode: str, binary: str, socket: str, pid: str, argv: str, marker: str) -> dict:
    serve = json.loads(argv)
    seen: dict = {"calls": [], "list_changed": 0, "sent_session_ids": []}

    async def on_request(request) -> None:
        sid = request.headers.get("mcp-session-id")
        if sid and sid not in seen["sent_session_ids"]:
            seen["sent_session_ids"].append(sid)

    async def on_message(message) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            seen["list_changed"] += 1

    http = httpx2.AsyncClient(
        transport=httpx2.AsyncHTTPTransport(uds=socket),
        event_hooks={"request": [on_request]},
        timeout=httpx2.Timeout(120.0),
    )
    info = types.Implementation(name="python-http-restart", version="1")
    daemon = None
    async with http:
        transport = streamable_http_client("http://localhost/mcp", http_client=http)
        async with Client(transport, mode=mode, client_info=info, message_handler=on_message) as client:

            async def call(label: str) -> None:
                r = await client.call_tool("bash", {"command": f"echo {label}"})
                seen["calls"].append([label, r.is_error, text(r).strip()])

            await call("before")

            for how, sig in (("sigterm", signal.SIGTERM), ("kill9", signal.SIGKILL)):
                target = int(pid) if daemon is None else daemon.pid
                # A call in flight when the daemon stops.
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
                # A new-era call is answered as one JSON body, whose headers come with the
                # result: a daemon killed before that leaves the SDK's POST with no response
                # at all, which this SDK raises out of the client (it ends the connection).
                if how == "kill9" and mode != "legacy":
                    os.kill(target, sig)
                    await wait_gone(target)
                    daemon = subprocess.Popen(serve, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    await wait_ready(socket)
                    await call(f"after-{how}")
                    continue
                async with anyio.create_task_group() as tg:
                    tg.start_soon(long_call)
                    with anyio.fail_after(20):
                        while not os.path.exists(marker):
                            await anyio.sleep(0.05)
                    stopped_at = time.monotonic()
                    os.kill(target, sig)
                    with anyio.fail_after(90):
                        while "seconds" not in inflight:
                            await anyio.sleep(0.05)
                    inflight["after_stop"] = time.monotonic() - stopped_at
                seen[f"inflight-{how}"] = inflight
                await wait_gone(target)
                daemon = subprocess.Popen(serve, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                await wait_ready(socket)
                await call(f"after-{how}")
            tools = await client.list_tools()
            seen["tools_after"] = "bash" in [t.name for t in tools.tools]
    if daemon is not None:
        daemon.terminate()
        daemon.wait(20)
    return seen


if __name__ == "__main__":
    print(json.dumps(anyio.run(main, *sys.argv[1:7]), sort_keys=True))
