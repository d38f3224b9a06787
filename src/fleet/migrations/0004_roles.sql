-- Schema 4: a user's token carries roles (`toolhost fleet token create --role approver`);
-- `fleet.approver_role` limits who decides approvals to the tokens holding that role.
ALTER TABLE toolhost_tokens ADD COLUMN roles text[] NOT NULL DEFAULT '{}';
