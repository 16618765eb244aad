//! The columns every writer binds (the outbox writer and the direct queue writer): one
//! array per column, in the messages' order.

use std::time::SystemTime;

use relayer_core::postgres::JsonbHeaders;
use relayer_core::time::database_micros;
use relayer_core::{Delivery, MessageId, NewMessage};

/// The columns every writer binds (outbox and direct queue), one array per column, in the
/// messages' order.
pub(crate) struct WrittenColumns<'a> {
    pub(crate) ids: Vec<MessageId>,
    pub(crate) destinations: Vec<&'a str>,
    pub(crate) bodies: Vec<&'a [u8]>,
    pub(crate) headers: Vec<JsonbHeaders<'a>>,
    pub(crate) trace_contexts: Vec<Option<&'a str>>,
    /// A delivery instant, or `None`.
    pub(crate) deliver_at: Vec<Option<SystemTime>>,
    /// A delay in microseconds, computed on the database clock (NS-4): `now() + delay`.
    pub(crate) delays: Vec<Option<i64>>,
}

impl<'a> WrittenColumns<'a> {
    pub(crate) fn of(messages: &'a [NewMessage]) -> Self {
        let (deliver_at, delays) = messages
            .iter()
            .map(|message| match message.delivery_time() {
                Delivery::Immediate => (None, None),
                Delivery::At(at) => (Some(at.to_system_time()), None),
                Delivery::After(delay) => (None, Some(database_micros(delay))),
            })
            .unzip();
        WrittenColumns {
            ids: messages.iter().map(NewMessage::message_id).collect(),
            destinations: messages.iter().map(NewMessage::destination).collect(),
            bodies: messages.iter().map(NewMessage::body).collect(),
            headers: messages.iter().map(|m| JsonbHeaders::from(m.header_map())).collect(),
            trace_contexts: messages.iter().map(NewMessage::creation_context).collect(),
            deliver_at,
            delays,
        }
    }
}
