#!/usr/bin/env bash
# Installs the pinned Python MCP SDK into tests/.venv (once) for the facade tests.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import mcp' 2>/dev/null; then
  python3 -m venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check -r facade_py/requirements.txt
fi
