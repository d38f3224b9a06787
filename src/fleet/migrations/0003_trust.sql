-- Schema 3: what makes the fleet one place of trust (proto-docs/fleet.md): the catalog's
-- pins and the marks of changed definitions (approved once, trusted everywhere; changed on
-- one member, held back on all), the guards' daily budgets, as numbers one statement
-- charges atomically, and the users' bearer tokens.
CREATE TABLE toolhost_pins (
    name text PRIMARY KEY,
    pin jsonb NOT NULL,
    member text NOT NULL,
    pinned timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE toolhost_pin_marks (
    name text PRIMARY KEY,
    seen jsonb NOT NULL,
    member text NOT NULL,
    marked timestamptz NOT NULL DEFAULT now()
);

-- Schema 2 kept each member's own copy of its daily counts here; they were never
-- fleet-wide, so the budgets start again from zero.
DROP TABLE toolhost_counters;

CREATE TABLE toolhost_budgets (
    key bytea PRIMARY KEY,
    day text NOT NULL,
    used bigint NOT NULL CHECK (used >= 0)
);

-- Users' bearer tokens: only each token's SHA-256 is stored; a revoked one stays listed.
CREATE TABLE toolhost_tokens (
    id text PRIMARY KEY,
    user_name text NOT NULL,
    sha256 text NOT NULL UNIQUE,
    created timestamptz NOT NULL DEFAULT now(),
    created_on text NOT NULL,
    revoked timestamptz
);
