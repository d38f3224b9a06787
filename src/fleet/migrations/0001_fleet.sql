-- Fleet mode's first schema: the fleet's key, its members, the shared approval queue and
-- the audit trail (proto-docs/fleet.md).
CREATE TABLE toolhost_fleet (
    id boolean PRIMARY KEY DEFAULT true CHECK (id),
    key_sha256 text NOT NULL,
    created timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE toolhost_members (
    id text PRIMARY KEY,
    host text NOT NULL,
    version text NOT NULL,
    listeners jsonb NOT NULL,
    internal_url text,
    started timestamptz NOT NULL DEFAULT now(),
    heartbeat timestamptz NOT NULL DEFAULT now(),
    servers jsonb NOT NULL DEFAULT '[]'
);

CREATE TABLE toolhost_approvals (
    id text PRIMARY KEY,
    member text NOT NULL,
    call_id text NOT NULL,
    tool text NOT NULL,
    session_id text,
    entry jsonb NOT NULL,
    state text NOT NULL CHECK (state IN ('pending', 'decided')),
    verdict jsonb,
    decided_on text,
    created timestamptz NOT NULL DEFAULT now(),
    decided_at timestamptz
);
CREATE INDEX toolhost_approvals_pending ON toolhost_approvals (member) WHERE state = 'pending';

CREATE TABLE toolhost_audit (
    member text NOT NULL,
    seq bigint NOT NULL,
    time_ms bigint NOT NULL,
    call_id text NOT NULL,
    tool text NOT NULL,
    ok boolean NOT NULL,
    record jsonb NOT NULL,
    written timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (member, seq)
);
CREATE INDEX toolhost_audit_time ON toolhost_audit (time_ms);
