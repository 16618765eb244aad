//! The routes, behind the access token, and the security headers every response carries.

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::routing::{get, post};

use crate::state::Shared;

/// Every route, behind the access token, with the security headers.
pub(crate) fn router(shared: Shared) -> Router {
    use crate::{actions, pages};
    Router::new()
        .route("/", get(pages::overview::show))
        .route("/workers", get(pages::workers::show))
        .route("/dead-letters", get(pages::dead_letters::list))
        .route("/dead-letters/message/{id}", get(pages::dead_letters::message))
        .route("/lanes", get(pages::lanes::show))
        .route("/doctor", get(pages::doctor::show))
        .route("/actions/preview", get(actions::preview))
        .route("/actions/apply", post(actions::apply))
        .route("/login", get(pages::login).post(pages::sign_in))
        .fallback(pages::not_found)
        .layer(axum::middleware::from_fn_with_state(shared.clone(), crate::auth::require_token))
        .layer(axum::middleware::map_response(security_headers))
        .with_state(shared)
}

/// Headers every response carries: no script may run, no frame may embed the console, no
/// page is cached or leaks its address (a filter may name a queue).
async fn security_headers(mut response: axum::response::Response) -> axum::response::Response {
    let headers = response.headers_mut();
    for (name, value) in [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; \
             frame-ancestors 'none'; base-uri 'none'",
        ),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-store"),
        (header::X_FRAME_OPTIONS, "DENY"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}
