-- relayer schema, version 5: autovacuum of the queue and outbox counts dead rows, not a
-- share of the table. "__SCHEMA__" and __PREFIX__ are replaced with the namespace's
-- validated identifiers.

-- PostgreSQL vacuums a table once its dead rows exceed threshold + scale_factor × live rows
-- (defaults 50 + 0.2 × live). Both tables hold rows that stay — dead letters in the queue
-- table, parked lanes and scheduled rows in the outbox — so with the defaults a standing
-- backlog of 1,000,000 rows postpones vacuum until 200,050 dead rows have piled up, while the
-- churning messages beside it leave two dead rows each (the receive or claim moves
-- visible_at, the ack or completion deletes). A fixed threshold vacuums at every autovacuum
-- visit that finds 1,000 dead rows, whatever stays in the table. `relayer doctor` compares
-- the tables' settings with these (docs/performance.md, "Held horizons" and step 5).
ALTER TABLE "__SCHEMA__"."__PREFIX__queue"
    SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);
ALTER TABLE "__SCHEMA__"."__PREFIX__outbox"
    SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);
