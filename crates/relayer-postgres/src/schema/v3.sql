-- relayer schema, version 3: rows wait for a process that has their transport (TRN-6).
-- "__SCHEMA__" and __PREFIX__ are replaced with the namespace's validated identifiers.

-- Every claim and recovery page reads only the transports registered in the claiming
-- process. The due rows are indexed per transport, so a claim descends once per registered
-- transport and never walks the due rows of a transport it lacks (a rolling deploy's new
-- transport, another service's): claim_due merges the per-transport scans by visible_at;
-- min(visible_at) per transport is one descent each. Same name, same role as before.
DROP INDEX "__SCHEMA__"."__PREFIX__outbox_due_idx";
CREATE INDEX "__PREFIX__outbox_due_idx" ON "__SCHEMA__"."__PREFIX__outbox"
    (transport, visible_at) WHERE lane IS NULL;
-- The recovery page judges eligibility from the index alone, the transport included, so a
-- page steps over rows of a transport the sweeper lacks without reading the heap.
DROP INDEX "__SCHEMA__"."__PREFIX__outbox_recovery_idx";
CREATE INDEX "__PREFIX__outbox_recovery_idx" ON "__SCHEMA__"."__PREFIX__outbox"
    (seq, visible_at) INCLUDE (created_at, transport) WHERE lane IS NULL;

-- The transports each instance registers, so `status` and the metrics can name rows that
-- wait on a transport no live instance has. Written with the settings rows (OPT-4).
ALTER TABLE "__SCHEMA__"."__PREFIX__instances" ADD COLUMN transports text[] NOT NULL DEFAULT '{}';
