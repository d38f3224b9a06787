"""What the two restart clients (restart.py over `toolhost mcp`, http_restart.py over `/mcp`)
share: a call's text and waiting for a stopped daemon to be gone."""

import os

import anyio
import mcp_types as types


def text(result) -> str:
    """The first block's text (a call's output; its facts follow as a JSON block)."""
    first = result.content[0] if result.content else None
    return first.text if isinstance(first, types.TextContent) else ""


async def wait_gone(p: int) -> None:
    """Until process `p` (our child or another's) is gone, its sockets closed with it."""
    with anyio.fail_after(30):
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
