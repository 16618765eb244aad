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

    /// Messages of up to three lanes (`None`: unordered) with seq = index, and a distinct
    /// delivery time per message plus extra deliveries per message.
    fn runs() -> impl proptest::strategy::Strategy<Value = (Vec<Option<u8>>, Vec<u32>, Vec<u8>)> {
        use proptest::prelude::*;
        (1usize..40).prop_flat_map(|n| {
            (
                proptest::collection::vec(proptest::option::of(0u8..3), n),
                Just((0..u32::try_from(n).unwrap_or(0)).collect::<Vec<_>>()).prop_shuffle(),
                proptest::collection::vec(0u8..3, n),
            )
        })
    }

    /// Written messages and their deliveries, each lane's first deliveries moved into seq
    /// order (the times of a lane's messages, sorted, handed out in seq order).
    fn ordered_run(lanes: &[Option<u8>], times: &[u32], extra: &[u8]) -> (Vec<Written>, Vec<Delivery>) {
        let written: Vec<Written> = lanes
            .iter()
            .enumerate()
            .map(|(i, lane)| Written {
                id: id(i as u128),
                seq: i64::try_from(i).unwrap_or(i64::MAX),
                lane: lane.map(|l| format!("lane-{l}")),
            })
            .collect();
        let mut first: Vec<i64> = times.iter().map(|t| i64::from(*t)).collect();
        for key in 0..3u8 {
            let members: Vec<usize> = (0..lanes.len()).filter(|i| lanes[*i] == Some(key)).collect();
            let mut lane_times: Vec<i64> = members.iter().map(|i| first[*i]).collect();
            lane_times.sort_unstable();
            for (i, time) in members.into_iter().zip(lane_times) {
                first[i] = time;
            }
        }
        let deliveries = (0..lanes.len())
            .map(|i| Delivery { id: id(i as u128), first: first[i], count: 1 + i64::from(extra[i]) })
            .collect();
        (written, deliveries)
    }

    proptest::proptest! {
        /// LAN-1: lanes whose first deliveries follow seq order are clean however they
        /// interleave with each other and with unordered messages, whatever the duplicates.
        #[test]
        fn deliveries_in_lane_order_with_any_duplicates_are_clean_lan_1((lanes, times, extra) in runs()) {
            let (written, deliveries) = ordered_run(&lanes, &times, &extra);
            let verdict = audit(&written, &deliveries);
            proptest::prop_assert!(verdict.is_clean(), "{:?}", verdict);
            proptest::prop_assert_eq!(verdict.delivered, written.len());
            let extra_total: i64 = extra.iter().map(|e| i64::from(*e)).sum();
            proptest::prop_assert_eq!(verdict.duplicates, extra_total);
        }

        /// LAN-1: swapping the first deliveries of two messages of one lane is reported.
        #[test]
        fn any_swap_within_a_lane_is_out_of_order_lan_1((lanes, times, extra) in runs(), pick in 0usize..1000) {
            let (written, mut deliveries) = ordered_run(&lanes, &times, &extra);
            let pairs: Vec<(usize, usize)> = (0..lanes.len())
                .flat_map(|i| (i + 1..lanes.len()).map(move |j| (i, j)))
                .filter(|(i, j)| lanes[*i].is_some() && lanes[*i] == lanes[*j])
                .collect();
            if let Some(&(i, j)) = pairs.get(pick % pairs.len().max(1)) {
                let (a, b) = (deliveries[i].first, deliveries[j].first);
                deliveries[i].first = b;
                deliveries[j].first = a;
                proptest::prop_assert!(!audit(&written, &deliveries).out_of_order.is_empty());
            }
        }
    }
}
