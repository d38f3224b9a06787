# toolhost in a container. Build: docker build -t toolhost .
# Run (socket and state in volumes, config directory bind-mounted, --init reaps the
# npx → node grandchildren of stdio MCP servers):
#   docker run --init -v toolhost-run:/run/toolhost -v toolhost-state:/var/lib/toolhost \
#     -v "$PWD/config:/etc/toolhost:ro" toolhost
# Bind-mount the config *directory*, not config.json: editors save by rename, and a
# single-file mount would pin the old inode so hot reload would never see the edit.

FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY tests ./tests
COPY benches ./benches
RUN cargo build --release --locked --bin toolhost

FROM node:20-bookworm-slim
# tini: signals reach the daemon and orphans are reaped even without `docker run --init`.
RUN apt-get update && apt-get install -y --no-install-recommends tini ca-certificates python3 \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system toolhost && useradd --system --gid toolhost --home-dir /var/lib/toolhost toolhost \
    && mkdir -p /run/toolhost /var/lib/toolhost /etc/toolhost /workspace \
    && chown toolhost:toolhost /run/toolhost /var/lib/toolhost /workspace
COPY --from=build /src/target/release/toolhost /usr/local/bin/toolhost
USER toolhost
ENV HOME=/var/lib/toolhost \
    npm_config_cache=/var/lib/toolhost/.npm \
    TOOLHOST_SOCKET=/run/toolhost/toolhost.sock \
    TOOLHOST_CONFIG=/etc/toolhost/config.json \
    RUST_LOG=info,rmcp=warn
VOLUME ["/run/toolhost", "/var/lib/toolhost"]
WORKDIR /workspace
HEALTHCHECK --interval=30s --timeout=5s CMD ["toolhost", "health"]
ENTRYPOINT ["tini", "--", "toolhost"]
CMD ["serve", "--workspace", "/workspace", "--data-dir", "/var/lib/toolhost"]
