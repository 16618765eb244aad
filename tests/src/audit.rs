//! What a scenario checks at its end, as a pure function of what was written and what the
//! queue holds: nothing lost, nothing delivered that was never written, lanes in order
//! (LAN-1), and how many deliveries were duplicates (at least once, DSP-7).
//!
//! A message's *first delivery* is its lowest `seq` in the queue table: the queue assigns
//! seqs in insert order, and an insert commits before the transport reports acceptance. A
//! lane is in order when the first deliveries of its messages come in the order of their
//! outbox seqs; a redelivered head (its owner died after the send, before the delete) is a
//! duplicate, not a reordering.

use std::collections::{BTreeMap, HashMap};

use relayer::NewMessage;
use relayer::postgres::Enqueued;
use uuid::Uuid;

/// One committed message, as the writer returned it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    /// The message id.
    pub id: Uuid,
    /// Its outbox seq.
    pub seq: i64,
    /// Its lane key, for an ordered message.
    pub lane: Option<String>,
}

impl Written {
    /// What the writer returned for `messages` (its rows come back in the messages' order).
    pub fn from_enqueued(messages: &[NewMessage], rows: &[Enqueued]) -> Vec<Written> {
        messages
            .iter()
            .zip(rows)
            .map(|(message, row)| Written {
                id: *row.id.as_uuid(),
                seq: row.seq,
                lane: message.lane_key().map(str::to_owned),
            })
            .collect()
    }
}

/// The deliveries of one message id found in the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// The message id.
    pub id: Uuid,
    /// The queue seq of its first delivery.
    pub first: i64,
    /// How many times it was delivered.
    pub count: i64,
}

/// The verdict of [`audit`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Audit {
    /// Messages written.
    pub written: usize,
    /// Of them, lane messages.
    pub lane_written: usize,
    /// Written messages delivered at least once.
    pub delivered: usize,
    /// Written messages never delivered.
    pub lost: Vec<Uuid>,
    /// Deliveries beyond each message's first.
    pub duplicates: i64,
    /// Messages delivered more than once.
    pub duplicated_messages: usize,
    /// Delivered ids that were never written (the caller decides whether some may be).
    pub unexpected: Vec<Uuid>,
    /// Lane messages whose first delivery came before that of an earlier message of their
    /// lane: `(lane, earlier id, later id)`.
    pub out_of_order: Vec<(String, Uuid, Uuid)>,
}

impl Audit {
    /// Whether nothing was lost, nothing unexpected delivered and every lane kept its order.
    pub fn is_clean(&self) -> bool {
        self.lost.is_empty() && self.unexpected.is_empty() && self.out_of_order.is_empty()
    }
}

/// Compares what was `written` with the `deliveries` found in the queue.
pub fn audit(written: &[Written], deliveries: &[Delivery]) -> Audit {
    let by_id: HashMap<Uuid, &Delivery> = deliveries.iter().map(|d| (d.id, d)).collect();
    let mut verdict = Audit { written: written.len(), ..Audit::default() };
    let mut lanes: BTreeMap<&str, Vec<(i64, Uuid, i64)>> = BTreeMap::new();
    for message in written {
        verdict.lane_written += usize::from(message.lane.is_some());
        let Some(delivery) = by_id.get(&message.id) else {
            verdict.lost.push(message.id);
            continue;
        };
        verdict.delivered += 1;
        if let Some(lane) = &message.lane {
            lanes.entry(lane).or_default().push((message.seq, message.id, delivery.first));
        }
    }
    for (lane, mut messages) in lanes {
        messages.sort_unstable();
        for pair in messages.windows(2) {
            let ((_, earlier, earlier_first), (_, later, later_first)) = (pair[0], pair[1]);
            if later_first < earlier_first {
                verdict.out_of_order.push((lane.to_owned(), earlier, later));
            }
        }
    }
    let written_ids: std::collections::HashSet<Uuid> = written.iter().map(|w| w.id).collect();
    for delivery in deliveries {
        if delivery.count > 1 {
            verdict.duplicates += delivery.count - 1;
            verdict.duplicated_messages += 1;
        }
        if !written_ids.contains(&delivery.id) {
            verdict.unexpected.push(delivery.id);
        }
    }
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    fn lane(n: u128, seq: i64, key: &str) -> Written {
        Written { id: id(n), seq, lane: Some(key.to_owned()) }
    }

    fn delivered(n: u128, first: i64, count: i64) -> Delivery {
        Delivery { id: id(n), first, count }
    }

    #[test]
    fn a_redelivered_head_is_a_duplicate_not_a_reordering_lan_1() {
        let written = [lane(1, 10, "a"), lane(2, 11, "a"), Written { id: id(3), seq: 12, lane: None }];
        // Head 1 sent, its owner killed before the delete, sent again, then 2.
        let verdict = audit(&written, &[delivered(1, 100, 2), delivered(2, 102, 1), delivered(3, 99, 1)]);
        assert!(verdict.is_clean(), "{verdict:?}");
        assert_eq!((verdict.delivered, verdict.duplicates, verdict.duplicated_messages), (3, 1, 1));
        assert_eq!(verdict.lane_written, 2);
    }

    #[test]
    fn a_later_lane_message_delivered_first_is_out_of_order_lan_1() {
        let written = [lane(1, 10, "a"), lane(2, 11, "a"), lane(3, 12, "b"), lane(4, 13, "a")];
        let verdict = audit(
            &written,
            &[delivered(1, 5, 1), delivered(2, 7, 1), delivered(3, 1, 1), delivered(4, 6, 1)],
        );
        assert_eq!(verdict.out_of_order, vec![("a".to_owned(), id(2), id(4))]);
        assert!(!verdict.is_clean());
    }

    #[test]
    fn undelivered_and_never_written_ids_are_named() {
        let written = [lane(1, 1, "a"), Written { id: id(2), seq: 2, lane: None }];
        let verdict = audit(&written, &[delivered(2, 1, 1), delivered(9, 2, 3)]);
        assert_eq!(verdict.lost, vec![id(1)]);
        assert_eq!(verdict.unexpected, vec![id(9)]);
        assert_eq!(verdict.duplicates, 2);
    }
}
