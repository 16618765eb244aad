//! What every handler reads: the settings, the namespace's statements, the pool, the
//! sampler's history, the doctor hook and the CSRF token.

use std::sync::Arc;

use relayer_core::{DeadLetterPolicies, Namespace};
use relayer_postgres::{DeadLetterApi, DeadLetterPolicyStatements, LaneAdmin, PgPool};

use crate::doctor::DoctorHook;
use crate::history::History;
use crate::settings::ConsoleSettings;

/// What every handler reads.
pub(crate) struct Inner {
    pub(crate) settings: ConsoleSettings,
    pub(crate) namespace: Namespace,
    pub(crate) pool: PgPool,
    pub(crate) dead_letters: DeadLetterApi,
    pub(crate) lanes: LaneAdmin,
    pub(crate) policy_statements: DeadLetterPolicyStatements,
    pub(crate) policies: Option<DeadLetterPolicies>,
    pub(crate) history: Option<History>,
    pub(crate) doctor: Option<DoctorHook>,
    /// The token every action form carries (one per process).
    pub(crate) csrf: String,
    /// Whether the console is served over TLS (the login cookie is then `Secure`).
    pub(crate) https: bool,
}

/// The handlers' state.
pub(crate) type Shared = Arc<Inner>;
