# toolhost in a container. Build: docker build -t toolhost .
# Run (socket and state in volumes, config directory bind-mounted read-write so that
# `toolhost mcp add/remove` can edit config.json; see proto-docs/deploy.md):
#   docker run -d --name toolhost -v toolhost-run:/run/toolhost -v toolhost-state:/var/lib/toolhost \
#     -v "$PWD/config:/etc/toolhost" -v "$PWD:/workspace" toolhost
# - No `--init`: tini is already PID 1 here (it reaps the npx → node grandchildren of stdio
#   MCP servers and forwards signals). Passing --init anyway is harmless (TINI_SUBREAPER).
# - Bind-mount the config *directory*, not config.json: editors save by rename, and a
#   single-file mount would pin the old inode so hot reload would never see the edit. A
#   `:ro` mount works too, but then `mcp add/remove` fail (the file cannot be written).
# - The daemon runs as uid/gid 10001 (`toolhost`). Host clients of the socket need that
#   uid, or a shared group with "listen": {"socket_mode": "0660"}, or run the container
#   as yourself: --user "$(id -u):$(id -g)" with bind-mounted directories you own.

FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY vendor ./vendor
COPY tests ./tests
COPY benches ./benches
RUN cargo build --release --locked --bin toolhost --bin toolhost-bridge

# uv/uvx, pinned, so Python MCP servers (`uvx mcp-server-…`) run as on a desktop.
FROM ghcr.io/astral-sh/uv:0.5.11 AS uv

# Node 22: type stripping, so TypeScript tool modules load as they are (22.18+ by default).
FROM node:22-bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends tini ca-certificates python3 \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 toolhost \
    && useradd --system --uid 10001 --gid toolhost --home-dir /var/lib/toolhost toolhost \
    && mkdir -p /run/toolhost /var/lib/toolhost /etc/toolhost /workspace \
    && echo '{}' > /etc/toolhost/config.json \
    && chown toolhost:toolhost /run/toolhost /var/lib/toolhost /etc/toolhost /etc/toolhost/config.json /workspace
COPY --from=uv /uv /uvx /usr/local/bin/
COPY --from=build /src/target/release/toolhost /usr/local/bin/toolhost
# `toolhost mcp` runs the small stdio bridge from beside `toolhost` (one per frontend).
COPY --from=build /src/target/release/toolhost-bridge /usr/local/bin/toolhost-bridge
# The module host's own pinned zod and TypeBox (`pi.zod`, `pi.typebox`), into
# /usr/local/lib/toolhost/modules, where the daemon looks: tool modules load with nothing
# installed next to them (proto-docs/modules.md).
RUN toolhost modules setup --system && rm -rf /root/.npm
USER toolhost
ENV HOME=/var/lib/toolhost \
    npm_config_cache=/var/lib/toolhost/.npm \
    TINI_SUBREAPER=1 \
    TOOLHOST_SOCKET=/run/toolhost/toolhost.sock \
    TOOLHOST_CONFIG=/etc/toolhost/config.json \
    RUST_LOG=info,rmcp=warn \
    GLIBC_TUNABLES=glibc.malloc.tcache_count=0
VOLUME ["/run/toolhost", "/var/lib/toolhost"]
WORKDIR /workspace
HEALTHCHECK --interval=30s --timeout=5s CMD ["toolhost", "health"]
ENTRYPOINT ["tini", "--", "toolhost"]
CMD ["serve", "--workspace", "/workspace", "--data-dir", "/var/lib/toolhost"]
