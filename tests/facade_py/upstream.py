"""A third-party MCP server of the 2026-07-28 era, on the Python MCP SDK, for toolhost's
MCP client to talk to over stdio (tests/it/mcp_era.rs).

Tools: `echo {text}` returns the text; `ask_name {message}` elicits a name from the user
(the SDK batches it into an `input_required` result for a client of the new era, and asks
mid-call for one of the `initialize` era) and returns `hello <name>`.
"""

from typing import Annotated

from pydantic import BaseModel

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.resolve import Elicit, Resolve


class Name(BaseModel):
    name: str


def ask(message: str) -> Elicit[Name]:
    return Elicit(message, Name)


app = MCPServer("toolhost-py-upstream")


@app.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@app.tool()
def ask_name(message: str, who: Annotated[Name, Resolve(ask)]) -> str:
    """Ask the user for a name and greet it."""
    return f"hello {who.name}"


if __name__ == "__main__":
    app.run()
