-- relayer schema, version 1.
-- "__SCHEMA__" and __PREFIX__ are replaced with the namespace's validated identifiers.
-- Every index names the statement it serves; see docs/performance.md for their plans.

-- The outbox: one row per message written and not yet accepted by its transport.
-- `visible_at` is the single "next visible at" column: the later of the delivery time, the
-- next retry time and a live claim's deadline. A row is free to claim iff visible_at <= now().
CREATE TABLE "__SCHEMA__"."__PREFIX__outbox" (
    seq            bigint      GENERATED ALWAYS AS IDENTITY,
    message_id     uuid        NOT NULL,
    transport      text        NOT NULL,
    destination    text        NOT NULL,
    body           bytea       NOT NULL,
    headers        jsonb       NOT NULL DEFAULT '{}',
    trace_context  text,
    lane           text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    deliver_at     timestamptz,
    visible_at     timestamptz NOT NULL DEFAULT now(),
    claim_token    uuid,
    attempts       integer     NOT NULL DEFAULT 0,
    last_error     text,
    CONSTRAINT "__PREFIX__outbox_pkey" PRIMARY KEY (seq),
    CONSTRAINT "__PREFIX__outbox_attempts_check" CHECK (attempts >= 0)
);
-- Recovery keyset scan (SWP-2, SWP-3): seq > $after AND seq <= $boundary AND visible_at <= now()
-- AND created_at <= cutoff ORDER BY seq; also max(seq) for the traversal boundary.
CREATE INDEX "__PREFIX__outbox_recovery_idx" ON "__SCHEMA__"."__PREFIX__outbox"
    (seq, visible_at) INCLUDE (created_at) WHERE lane IS NULL;
-- Due unordered rows (notified/polling dispatcher; idle checks): visible_at <= now().
CREATE INDEX "__PREFIX__outbox_due_idx" ON "__SCHEMA__"."__PREFIX__outbox"
    (visible_at) WHERE lane IS NULL;
-- Lane heads (LAN-1): the lowest seq per lane, found by a skip scan over distinct lanes;
-- visible_at is included so a lane claim reads whether each head is due from the index.
CREATE INDEX "__PREFIX__outbox_lane_idx" ON "__SCHEMA__"."__PREFIX__outbox"
    (lane, seq) INCLUDE (visible_at) WHERE lane IS NOT NULL;

-- Ordered lanes: one owner at a time by a claim with a deadline (LAN-3); a parked lane stays
-- blocked until released (LAN-2, LAN-5).
CREATE TABLE "__SCHEMA__"."__PREFIX__lanes" (
    lane           text        NOT NULL,
    claim_token    uuid,
    claimed_until  timestamptz,
    parked_at      timestamptz,
    parked_seq     bigint,
    parked_reason  text,
    CONSTRAINT "__PREFIX__lanes_pkey" PRIMARY KEY (lane)
);
-- Parked lanes for status and the operations CLI.
CREATE INDEX "__PREFIX__lanes_parked_idx" ON "__SCHEMA__"."__PREFIX__lanes"
    (parked_at) WHERE parked_at IS NOT NULL;

-- Poison rows moved out of the outbox (DSP-5), kept for dead_retention from failed_at.
CREATE TABLE "__SCHEMA__"."__PREFIX__dead" (
    seq            bigint      NOT NULL,
    message_id     uuid        NOT NULL,
    transport      text        NOT NULL,
    destination    text        NOT NULL,
    body           bytea       NOT NULL,
    headers        jsonb       NOT NULL DEFAULT '{}',
    trace_context  text,
    lane           text,
    created_at     timestamptz NOT NULL,
    deliver_at     timestamptz,
    failed_at      timestamptz NOT NULL DEFAULT now(),
    attempts       integer     NOT NULL,
    last_error     text,
    CONSTRAINT "__PREFIX__dead_pkey" PRIMARY KEY (seq)
);
-- Retention (RET-2): failed_at < cutoff ORDER BY failed_at LIMIT n FOR UPDATE SKIP LOCKED.
CREATE INDEX "__PREFIX__dead_failed_at_idx" ON "__SCHEMA__"."__PREFIX__dead" (failed_at);
-- Operations: show / redrive one dead message by id (DLP-7).
CREATE INDEX "__PREFIX__dead_message_id_idx" ON "__SCHEMA__"."__PREFIX__dead" (message_id);

-- Consumer deduplication (QUE-3): one row per (consumer, message) processed.
CREATE TABLE "__SCHEMA__"."__PREFIX__inbox" (
    consumer       text        NOT NULL,
    message_id     uuid        NOT NULL,
    processed_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT "__PREFIX__inbox_pkey" PRIMARY KEY (consumer, message_id)
);
-- Retention (RET-2): processed_at < cutoff ORDER BY processed_at LIMIT n FOR UPDATE SKIP LOCKED.
CREATE INDEX "__PREFIX__inbox_processed_at_idx" ON "__SCHEMA__"."__PREFIX__inbox" (processed_at);

-- Leadership leases (LDR-2, LDR-6): one row per job; term grows with each new holder.
CREATE TABLE "__SCHEMA__"."__PREFIX__leases" (
    job            text        NOT NULL,
    owner          text        NOT NULL,
    term           bigint      NOT NULL,
    acquired_at    timestamptz NOT NULL DEFAULT now(),
    renewed_at     timestamptz NOT NULL DEFAULT now(),
    expires_at     timestamptz NOT NULL,
    CONSTRAINT "__PREFIX__leases_pkey" PRIMARY KEY (job),
    CONSTRAINT "__PREFIX__leases_term_check" CHECK (term > 0)
);

-- relayer's own PostgreSQL queue transport (QUE-1, QUE-2), dead-letter queues included.
CREATE TABLE "__SCHEMA__"."__PREFIX__queue" (
    seq               bigint      GENERATED ALWAYS AS IDENTITY,
    message_id        uuid        NOT NULL,
    queue             text        NOT NULL,
    body              bytea       NOT NULL,
    headers           jsonb       NOT NULL DEFAULT '{}',
    trace_context     text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    visible_at        timestamptz NOT NULL DEFAULT now(),
    handled_count     integer     NOT NULL DEFAULT 0,
    original_topic    text,
    rejection_reason  text,
    rejection_message text,
    dead_lettered_at  timestamptz,
    CONSTRAINT "__PREFIX__queue_pkey" PRIMARY KEY (seq)
);
-- Receive (QUE-1): queue = $1 AND visible_at <= now() ORDER BY visible_at, seq
-- LIMIT n FOR UPDATE SKIP LOCKED.
CREATE INDEX "__PREFIX__queue_receive_idx" ON "__SCHEMA__"."__PREFIX__queue" (queue, visible_at, seq);
-- Dead-letter policies (DLP-4): queue = $dlq AND original_topic = $topic AND dead_lettered_at < cutoff.
CREATE INDEX "__PREFIX__queue_dead_letter_idx" ON "__SCHEMA__"."__PREFIX__queue"
    (queue, original_topic, dead_lettered_at) WHERE original_topic IS NOT NULL;

-- Manual operations (who, when, what): redrive, purge, lane release or skip (DLP-7, LAN-5).
CREATE TABLE "__SCHEMA__"."__PREFIX__audit" (
    id             bigint      GENERATED ALWAYS AS IDENTITY,
    at             timestamptz NOT NULL DEFAULT now(),
    actor          text        NOT NULL,
    action         text        NOT NULL,
    subject        text        NOT NULL,
    detail         jsonb       NOT NULL DEFAULT '{}',
    CONSTRAINT "__PREFIX__audit_pkey" PRIMARY KEY (id)
);

-- Settings fingerprints per running instance, to detect replicas that disagree (OPT-4).
CREATE TABLE "__SCHEMA__"."__PREFIX__instances" (
    worker         text        NOT NULL,
    instance       text        NOT NULL,
    fingerprint    text        NOT NULL,
    settings       jsonb       NOT NULL,
    started_at     timestamptz NOT NULL DEFAULT now(),
    seen_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT "__PREFIX__instances_pkey" PRIMARY KEY (worker, instance)
);
