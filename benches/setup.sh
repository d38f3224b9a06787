#!/usr/bin/env bash
# Installs what the sharing benchmark (benches/sharing.rs) runs besides the test suite's
# packages: mcp-server-time from PyPI, pinned, in its own venv under target/ (the tests'
# venv, tests/.venv, is left alone). Idempotent; `cargo bench --bench sharing` runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=2026.10.19
VENV=target/bench-venv
if [ -x "$VENV/bin/mcp-server-time" ] &&
  [ "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("mcp-server-time"))' 2>/dev/null)" = "$VERSION" ]; then
  exit 0
fi
python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check "mcp-server-time==$VERSION"
