-- relayer schema, version 6: dead letters found by id and listed in order without reading
-- the queue table's live messages. "__SCHEMA__" and __PREFIX__ are replaced with the
-- namespace's validated identifiers.

-- A dead letter is a queue row with dead_lettered_at set. queue_dead_letter_idx serves the
-- policies (by queue and original topic); an operator asking for one letter by message id,
-- or for every dead letter in seq order (the console's and the CLI's unfiltered listing),
-- had no index but the whole table's. Both are partial: they hold the dead letters only,
-- so the messages that churn through the queue never touch them.
--
-- Building them reads the queue table once under a SHARE lock (writers wait for the
-- build): on a queue holding millions of rows, apply this step in a quiet moment.
CREATE INDEX "__PREFIX__queue_dead_letter_id_idx" ON "__SCHEMA__"."__PREFIX__queue"
    (message_id) WHERE dead_lettered_at IS NOT NULL;
CREATE INDEX "__PREFIX__queue_dead_letter_seq_idx" ON "__SCHEMA__"."__PREFIX__queue"
    (seq) WHERE dead_lettered_at IS NOT NULL;
