//! Multi-row statements split by bytes (SPEC §15).
//!
//! Every writer binds its rows as arrays of one statement (`unnest`): one round trip for
//! the batch. PostgreSQL refuses a protocol message over 1 GiB and any one value (each
//! `bytea[]` array is one) over 1 GiB, so a batch of large bodies — 100 bodies of 16 MiB
//! — would fail as a whole, and on every retry. [`split_by_bytes`] cuts a batch, in order,
//! into runs whose rows add up to at most [`MAX_STATEMENT_BYTES`] each; a writer sends one
//! statement per run, on the same client. A row larger than that alone is a run of its own
//! (a body is at most `MAX_BODY_BYTES_LIMIT`, 1 GiB less 1 MiB, so it still fits).
//!
//! Inside the caller's transaction (OUT-1) the runs commit together. On an autocommitting
//! client they commit one by one: a failure after the first run leaves that run written,
//! and the retry writes it again (at least once, DSP-7).

use std::ops::Range;

use relayer_core::{Envelope, NewMessage};

/// The most bytes of rows one multi-row statement binds: a quarter of PostgreSQL's 1 GiB,
/// leaving room for the encoding of arrays and for the other parameters.
pub(crate) const MAX_STATEMENT_BYTES: usize = 256 << 20;

/// What a row costs beyond its variable-length columns: its fixed columns (id, times) and
/// each array element's length word.
const ROW_OVERHEAD_BYTES: usize = 128;

/// Consecutive, non-empty ranges covering `0..sizes.len()` in order, each adding up to at
/// most `limit` bytes, or holding one row larger than `limit` alone; each range is as long
/// as the limit allows (the next row would pass it).
pub(crate) fn split_by_bytes(sizes: &[usize], limit: usize) -> Vec<Range<usize>> {
    let mut ranges = Vec::new();
    let (mut start, mut total) = (0, 0usize);
    for (index, size) in sizes.iter().enumerate() {
        if index > start && total.saturating_add(*size) > limit {
            ranges.push(start..index);
            (start, total) = (index, 0);
        }
        total = total.saturating_add(*size);
    }
    if start < sizes.len() {
        ranges.push(start..sizes.len());
    }
    ranges
}

/// The bytes a new message binds in a writer's insert.
pub(crate) fn message_bytes(message: &NewMessage) -> usize {
    let headers: usize = message.header_map().iter().map(|(name, value)| name.len() + value.len() + 8).sum();
    ROW_OVERHEAD_BYTES
        + message.body().len()
        + headers
        + message.transport().len()
        + message.destination().len()
        + message.creation_context().map_or(0, str::len)
        + message.lane_key().map_or(0, str::len)
}

/// The bytes an envelope binds in the queue transport's insert.
pub(crate) fn envelope_bytes(envelope: &Envelope) -> usize {
    let headers: usize = envelope.headers.iter().map(|(name, value)| name.len() + value.len() + 8).sum();
    ROW_OVERHEAD_BYTES + envelope.body.len() + headers + envelope.trace_context.as_deref().map_or(0, str::len)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// SPEC §15: the runs cover every row once, in order; each is within the limit or
        /// a single row; and none could take the next row without passing the limit.
        #[test]
        fn runs_cover_every_row_in_order_within_the_limit_spec_15(
            sizes in proptest::collection::vec(prop_oneof![0usize..100, 0usize..5_000], 0..60),
            limit in 0usize..3_000,
        ) {
            let ranges = split_by_bytes(&sizes, limit);
            let mut next = 0;
            for range in &ranges {
                prop_assert_eq!(range.start, next);
                prop_assert!(range.end > range.start);
                let total: usize = sizes[range.clone()].iter().sum();
                prop_assert!(total <= limit || range.len() == 1, "{:?} holds {} bytes", range, total);
                if let Some(following) = sizes.get(range.end) {
                    prop_assert!(total + following > limit, "{:?} could take row {}", range, range.end);
                }
                next = range.end;
            }
            prop_assert_eq!(next, sizes.len());
        }
    }

    #[test]
    fn a_batch_within_the_limit_is_one_run_and_an_empty_one_none() {
        assert_eq!(split_by_bytes(&[10, 20, 30], 60), vec![0..3]);
        assert_eq!(split_by_bytes(&[10, 20, 30], 59), vec![0..2, 2..3]);
        assert_eq!(split_by_bytes(&[100, 1, 100], 50), vec![0..1, 1..2, 2..3]);
        assert!(split_by_bytes(&[], 50).is_empty());
    }
}

/// Splitting against a real PostgreSQL, with a threshold lowered so that a few small rows
/// make several runs.
#[cfg(test)]
mod pg_tests {
    #![allow(clippy::unwrap_used)] // A failed unwrap is a failed test.

    use relayer_core::{Envelope, MessageId, NewMessage, Timestamp};
    use relayer_test_support::TestDb;

    use super::*;
    use crate::{OutboxWriter, QueueStatements, QueueWriter};

    /// Room for about two of the test's rows per statement.
    const SMALL: usize = 2 * ROW_OVERHEAD_BYTES + 100;

    async fn setup() -> (TestDb, tokio_postgres::Client) {
        let db = TestDb::new().await;
        let mut client = db.connect().await;
        crate::migrate(&mut client, db.namespace()).await.unwrap();
        (db, client)
    }

    /// The ids of `table`'s rows in `seq` order.
    async fn ids_in_seq_order(client: &tokio_postgres::Client, db: &TestDb, table: &str) -> Vec<MessageId> {
        let sql = format!("SELECT message_id FROM {} ORDER BY seq", db.namespace().table(table));
        client.query(&sql, &[]).await.unwrap().iter().map(|row| row.get(0)).collect()
    }

    /// SPEC §15, OUT-1, LAN-1: an outbox batch split into runs lands whole and in order,
    /// lane rows of two lanes included, inside the caller's transaction; a rollback leaves
    /// none of the runs.
    #[tokio::test]
    async fn a_split_outbox_batch_lands_whole_and_in_order_spec_15() {
        let (db, mut client) = setup().await;
        let messages: Vec<NewMessage> = (0..11)
            .map(|n| {
                let message = NewMessage::new("queue", "orders", format!("body {n}").into_bytes());
                if n % 3 == 0 { message.lane(format!("lane-{}", n % 2)) } else { message }
            })
            .collect();
        let sizes: Vec<usize> = messages.iter().map(message_bytes).collect();
        assert!(split_by_bytes(&sizes, SMALL).len() >= 5, "the batch is split");
        let writer = OutboxWriter::new(db.namespace(), ["queue"]).with_max_statement_bytes(SMALL);

        let tx = client.transaction().await.unwrap();
        writer.enqueue(&tx, &messages).await.unwrap();
        tx.rollback().await.unwrap();
        assert!(ids_in_seq_order(&client, &db, "outbox").await.is_empty(), "no run outlives a rollback");

        let tx = client.transaction().await.unwrap();
        let written = writer.enqueue(&tx, &messages).await.unwrap();
        tx.commit().await.unwrap();
        let expected: Vec<MessageId> = messages.iter().map(NewMessage::message_id).collect();
        assert_eq!(written.iter().map(|w| w.id).collect::<Vec<_>>(), expected);
        assert!(written.windows(2).all(|pair| pair[0].seq < pair[1].seq));
        assert_eq!(ids_in_seq_order(&client, &db, "outbox").await, expected);
    }

    /// SPEC §15, QUE-4: a direct queue batch split into runs lands whole and in order.
    #[tokio::test]
    async fn a_split_direct_queue_batch_lands_whole_and_in_order_spec_15() {
        let (db, mut client) = setup().await;
        let messages: Vec<NewMessage> =
            (0..9).map(|n| NewMessage::new("queue", "orders", format!("body {n}").into_bytes())).collect();
        let writer = QueueWriter::new(db.namespace(), "queue").with_max_statement_bytes(SMALL);
        let tx = client.transaction().await.unwrap();
        let written = writer.enqueue(&tx, &messages).await.unwrap();
        tx.commit().await.unwrap();
        let expected: Vec<MessageId> = messages.iter().map(NewMessage::message_id).collect();
        assert_eq!(written.iter().map(|w| w.id).collect::<Vec<_>>(), expected);
        assert_eq!(ids_in_seq_order(&client, &db, "queue").await, expected);
    }

    /// SPEC §15, QUE-1: the queue transport's group insert split into runs lands whole and
    /// in order.
    #[tokio::test]
    async fn a_split_queue_transport_insert_lands_whole_and_in_order_spec_15() {
        let (db, client) = setup().await;
        let envelopes: Vec<Envelope> = (0..9)
            .map(|n| Envelope {
                id: MessageId::new(),
                body: format!("body {n}").into_bytes(),
                headers: [("n".to_owned(), n.to_string())].into(),
                created_at: Timestamp::from_micros(0),
                trace_context: None,
                lane: None,
                attempts: 0,
            })
            .collect();
        let sizes: Vec<usize> = envelopes.iter().map(envelope_bytes).collect();
        assert!(split_by_bytes(&sizes, SMALL).len() >= 4, "the insert is split");
        let statements = QueueStatements::new(db.namespace()).with_max_statement_bytes(SMALL);
        assert_eq!(statements.insert(&client, "orders", &envelopes).await.unwrap(), 9);
        let expected: Vec<MessageId> = envelopes.iter().map(|e| e.id).collect();
        assert_eq!(ids_in_seq_order(&client, &db, "queue").await, expected);
    }
}
