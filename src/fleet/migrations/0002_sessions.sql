-- Schema 2: what the session store keeps, shared by every member (proto-docs/fleet.md):
-- sessions (meta and tool views), the small keyed records (`/mcp` sessions, frontend
-- identities) and the guards' counters, so a session made on one member is served by
-- another and a budget holds across members.
CREATE TABLE toolhost_sessions (
    id text PRIMARY KEY,
    created_at bigint NOT NULL,
    session jsonb NOT NULL
);
CREATE INDEX toolhost_sessions_newest ON toolhost_sessions (created_at DESC, id);

CREATE TABLE toolhost_records (
    kind text NOT NULL,
    key text NOT NULL,
    value bytea NOT NULL,
    PRIMARY KEY (kind, key)
);

CREATE TABLE toolhost_counters (
    key bytea PRIMARY KEY,
    value bytea NOT NULL
);
