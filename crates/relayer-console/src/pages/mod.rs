//! The pages: each reads with bounded statements and renders escaped HTML.

pub(crate) mod dead_letters;
pub(crate) mod doctor;
pub(crate) mod lanes;
pub(crate) mod overview;
pub(crate) mod workers;

use axum::Form;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use relayer_postgres::{PgConnection, PgPool};

use crate::auth::{COOKIE, login_page, same, shown_actor};
use crate::html::{esc, esc_with, page};
use crate::state::Shared;

/// A page's failure: its status and what to tell the operator.
pub(crate) struct Failure {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Failure { status, message: message.into() }
    }

    /// A database error, with its cause chain.
    pub(crate) fn database(error: &(dyn std::error::Error + 'static)) -> Self {
        Failure::new(StatusCode::SERVICE_UNAVAILABLE, relayer_core::error_chain(error))
    }
}

/// A borrowed connection of the console's pool.
pub(crate) async fn connection(pool: &PgPool) -> Result<PgConnection<'_>, Failure> {
    pool.get().await.map_err(|e| {
        Failure::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("no database connection: {}", relayer_core::error_chain(&e)),
        )
    })
}

/// Renders a page: `body` on success, the failure's message (escaped) otherwise.
pub(crate) fn render(
    shared: &Shared,
    headers: &HeaderMap,
    title: &str,
    here: &str,
    body: Result<String, Failure>,
) -> Response {
    let actor = shown_actor(shared, headers);
    let namespace = shared.namespace.to_string();
    match body {
        Ok(body) => Html(page(title, here, &namespace, actor.as_deref(), &body)).into_response(),
        Err(failure) => {
            let body =
                format!("<pre class=\"error\" id=\"failure\">{}</pre>", esc_with(&failure.message, true));
            (failure.status, Html(page(title, here, &namespace, actor.as_deref(), &body))).into_response()
        }
    }
}

/// Any other path.
pub(crate) async fn not_found(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    render(&shared, &headers, "Not found", "", Err(Failure::new(StatusCode::NOT_FOUND, "no such page")))
}

/// The login form (only useful with an access token).
pub(crate) async fn login(State(shared): State<Shared>) -> Response {
    login_page(&shared, None).into_response()
}

/// The login form's fields.
#[derive(serde::Deserialize)]
pub(crate) struct SignIn {
    token: String,
}

/// Checks the token and sets the cookie that carries it on later requests.
pub(crate) async fn sign_in(State(shared): State<Shared>, Form(form): Form<SignIn>) -> Response {
    let Some(token) = &shared.settings.access_token else {
        return (StatusCode::SEE_OTHER, [(header::LOCATION, "/")]).into_response();
    };
    if !same(form.token.trim(), token) {
        return (StatusCode::UNAUTHORIZED, login_page(&shared, Some("wrong access token"))).into_response();
    }
    let secure = if shared.https { "; Secure" } else { "" };
    let cookie = format!("{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict{secure}");
    (StatusCode::SEE_OTHER, [(header::LOCATION, "/".to_owned()), (header::SET_COOKIE, cookie)])
        .into_response()
}

/// `value` or `-`, escaped.
pub(crate) fn or_dash(value: Option<&str>) -> String {
    value.map_or_else(|| "-".to_owned(), esc)
}
