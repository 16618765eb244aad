-- relayer schema, version 2: the queue consumer (QUE-1, QUE-2, QUE-5).
-- "__SCHEMA__" and __PREFIX__ are replaced with the namespace's validated identifiers.

-- Every receive stamps the messages it takes with a receipt token; ack, requeue,
-- dead-letter and the heartbeat match (seq, receipt), so a reader whose visibility lapsed,
-- and whose message another reader has received since, changes nothing (QUE-5).
-- Statements reach a row by queue_pkey (seq) and check the receipt on it: no index of its own.
ALTER TABLE "__SCHEMA__"."__PREFIX__queue" ADD COLUMN receipt uuid;
