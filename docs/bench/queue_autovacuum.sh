#!/usr/bin/env bash
# Schema step 5 measured: does a queue table with a standing backlog get vacuumed in time,
# with PostgreSQL's defaults and with the per-table settings relayer ships?
#
# A throwaway cluster (initdb/pg_ctl on a free port, PostgreSQL's defaults: autovacuum on,
# naptime 60 s; only log_autovacuum_min_duration=0 added), two namespaces in one database
# churning side by side under the same load: `defaults` (schema steps 1-4) and `step5`
# (the same plus step 5's storage parameters on the queue and outbox tables). Each queue
# table holds STANDING dead letters (rows that stay, as a dead-letter queue does) and churns
# RATE messages/s through one queue: insert, receive (UPDATE visible_at, as relayer's
# receive does), ack (DELETE). Every 10 s it prints, per namespace: dead tuples, autovacuum
# count, heap size, and index entries read per receive-index scan. The cluster is stopped
# and deleted at exit. Usage: docs/bench/queue_autovacuum.sh [seconds] (default 300)
set -euo pipefail
SECONDS_TO_RUN=${1:-300}
STANDING=${STANDING:-200000}
RATE=${RATE:-100}
HERE=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$(dirname "$(command -v pg_ctl)")
DIR=$(mktemp -d /tmp/relayer-avac-XXXXXX)
RUN=()
if [ "$(id -u)" = 0 ]; then chown postgres: "$DIR"; RUN=(runuser -u postgres --); fi
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"${RUN[@]}" "$BIN/initdb" -D "$DIR/data" -U postgres -A trust -E UTF8 --locale=C >/dev/null
cleanup() { "${RUN[@]}" "$BIN/pg_ctl" -D "$DIR/data" -m immediate stop >/dev/null 2>&1 || true; rm -rf "$DIR"; }
trap cleanup EXIT
"${RUN[@]}" "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/log" -w -o "-p $PORT -c listen_addresses=127.0.0.1 -c unix_socket_directories='' -c log_autovacuum_min_duration=0" start >/dev/null
PSQL=(psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U postgres postgres)
render() { # schema name, steps...
  local schema=$1; shift
  echo "CREATE SCHEMA $schema;"
  for step in "$@"; do sed -e "s/__SCHEMA__/$schema/g" -e "s/__PREFIX__/relayer_/g" "$HERE/crates/relayer-postgres/src/schema/v$step.sql"; done
}
STEPS_ALL=$(ls "$HERE"/crates/relayer-postgres/src/schema/v*.sql | sed 's/.*v\([0-9]*\)\.sql/\1/' | sort -n | tr '\n' ' ')
{ render defaults 1 2 3 4; render step5 $STEPS_ALL; } | "${PSQL[@]}"
for ns in defaults step5; do
  "${PSQL[@]}" -c "INSERT INTO $ns.relayer_queue (message_id, queue, body, original_topic, rejection_reason, dead_lettered_at)
    SELECT gen_random_uuid(), 'orders.dead_letters', '\\x00', 'orders', 'rejected', now() FROM generate_series(1, $STANDING)" \
    -c "VACUUM ANALYZE $ns.relayer_queue"
  cat > "$DIR/$ns.sql" <<SQL
INSERT INTO $ns.relayer_queue (message_id, queue, body) VALUES (gen_random_uuid(), 'orders', '\\x00');
WITH taken AS (SELECT seq FROM $ns.relayer_queue WHERE queue = 'orders' AND visible_at <= now() ORDER BY visible_at, seq LIMIT 1 FOR UPDATE SKIP LOCKED) UPDATE $ns.relayer_queue q SET visible_at = now() + interval '30 seconds', receipt = gen_random_uuid(), handled_count = q.handled_count + 1 FROM taken WHERE q.seq = taken.seq RETURNING q.seq AS taken_seq \gset
DELETE FROM $ns.relayer_queue WHERE seq = :taken_seq;
SQL
done
echo "cluster on port $PORT: $STANDING standing dead letters per queue table, $RATE msg/s churn each, ${SECONDS_TO_RUN}s"
"${PSQL[@]}" -Atc "SELECT c.relnamespace::regnamespace, c.relname, c.reloptions FROM pg_class c WHERE c.relname IN ('relayer_queue','relayer_outbox') ORDER BY 1, 2"
for ns in defaults step5; do
  pgbench -n -h 127.0.0.1 -p "$PORT" -U postgres -c 1 -R "$RATE" -T "$SECONDS_TO_RUN" -f "$DIR/$ns.sql" postgres > "$DIR/$ns.pgbench" 2>&1 &
done
sample() {
  "${PSQL[@]}" -AtF ' ' -c "SELECT s.schemaname, s.n_dead_tup, s.autovacuum_count, pg_relation_size(s.relid) / 1024,
      i.idx_tup_read, i.idx_scan
    FROM pg_stat_user_tables s JOIN pg_stat_user_indexes i ON i.relid = s.relid AND i.indexrelname = 'relayer_queue_receive_idx'
    WHERE s.relname = 'relayer_queue' ORDER BY 1"
}
declare -A last_read last_scan peak
printf '%5s  %-8s %9s %5s %9s %14s\n' t namespace dead avac heap_kB entries/scan
for ((t = 10; t <= SECONDS_TO_RUN; t += 10)); do
  sleep 10
  while read -r ns dead avac heap read scans; do
    per=$(( (scans - ${last_scan[$ns]:-0}) > 0 ? (read - ${last_read[$ns]:-0}) / (scans - ${last_scan[$ns]:-0}) : 0 ))
    last_read[$ns]=$read; last_scan[$ns]=$scans
    (( dead > ${peak[$ns]:-0} )) && peak[$ns]=$dead
    printf '%5s  %-8s %9s %5s %9s %14s\n' "$t" "$ns" "$dead" "$avac" "$heap" "$per"
  done < <(sample)
done
wait
for ns in defaults step5; do echo "$ns: peak dead tuples ${peak[$ns]}; $(grep -E 'tps|number of transactions actually' "$DIR/$ns.pgbench" | tr '\n' ' ')"; done
echo "autovacuum runs of the queue tables (server log): namespace, pages scanned, tuples removed, not yet removable, elapsed"
awk '/automatic vacuum of table "postgres\.[a-z0-9]*\.relayer_queue"/ { split($0, a, "\""); split(a[2], t, "."); ns = t[2]; want = 1; next }
     want && /pages:/ { match($0, /[0-9]+ scanned/); pages = substr($0, RSTART, RLENGTH) }
     want && /tuples:/ { match($0, /[0-9]+ removed/); removed = substr($0, RSTART, RLENGTH);
                         match($0, /[0-9]+ are dead but not yet removable/); kept = substr($0, RSTART, RLENGTH) }
     want && /elapsed:/ { match($0, /elapsed: [0-9.]+ s/); printf "  %-8s %s, %s, %s, %s\n", ns, pages, removed, kept, substr($0, RSTART, RLENGTH); want = 0 }' "$DIR/log"
