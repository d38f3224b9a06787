#!/usr/bin/env bash
# Runs the whole test suite from a fresh clone: installs the pinned third-party MCP servers
# (npm, from tests/package-lock.json), builds, then runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -d tests/node_modules/@modelcontextprotocol/server-everything ]; then
  npm ci --prefix tests --no-audit --no-fund --loglevel=error
fi
if command -v cargo-nextest >/dev/null 2>&1; then
  cargo nextest run --lib --bins --tests --no-fail-fast "$@"
else
  cargo test --lib --bins --tests --no-fail-fast "$@"
fi
