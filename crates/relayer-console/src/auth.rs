//! Who may see the console and who may act through it: the access token (a bearer header
//! or the login cookie), the CSRF token every action form carries, and the actor an action
//! is audited as.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::html::{esc, page};
use crate::settings::{ActorSource, actor_name};
use crate::state::Shared;

/// The cookie the login page sets.
pub(crate) const COOKIE: &str = "relayer_console";

/// Whether `a` and `b` are equal, in time that depends on their lengths only.
pub(crate) fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A fresh random secret (CSRF token): 244 random bits as hex.
pub(crate) fn secret() -> String {
    format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple())
}

/// The access token a request presents, if any: `Authorization: Bearer …` or the cookie.
fn presented(headers: &HeaderMap) -> Option<String> {
    if let Some(bearer) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    {
        return Some(bearer.trim().to_owned());
    }
    headers.get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok()).find_map(|cookies| {
        cookies.split(';').find_map(|c| c.trim().strip_prefix(&format!("{COOKIE}=")).map(str::to_owned))
    })
}

/// Whether a console without an access token may answer a request naming `host` (the `Host`
/// header, port and all): only the address it listens on, a loopback literal or
/// `localhost`. A page of another site that rebinds its own name to 127.0.0.1 (DNS
/// rebinding) would otherwise be same-origin with the console and could read a form's CSRF
/// token and act; its requests name that site's host, so they are refused.
pub(crate) fn host_allowed(host: &str, listen: std::net::SocketAddr) -> bool {
    let name = match host.strip_prefix('[') {
        Some(bracketed) => bracketed.split_once(']').map_or(bracketed, |(ip, _)| ip),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    if name.eq_ignore_ascii_case("localhost") {
        return true;
    }
    name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip == listen.ip() || ip.is_loopback())
}

/// Lets a request through when no access token is configured (then only for the console's
/// own host names: [`host_allowed`]), or it presents the token; the login page is always
/// reachable. Others get the login page (401), or 421 for a foreign host.
pub(crate) async fn require_token(State(shared): State<Shared>, request: Request, next: Next) -> Response {
    let Some(token) = &shared.settings.access_token else {
        let host = request.headers().get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
        if !host_allowed(host, shared.settings.listen) {
            return (StatusCode::MISDIRECTED_REQUEST, "this console answers only to its own address\n")
                .into_response();
        }
        return next.run(request).await;
    };
    if request.uri().path() == "/login" || presented(request.headers()).is_some_and(|p| same(&p, token)) {
        return next.run(request).await;
    }
    (StatusCode::UNAUTHORIZED, login_page(&shared, None)).into_response()
}

/// The login form.
pub(crate) fn login_page(shared: &Shared, problem: Option<&str>) -> axum::response::Html<String> {
    let problem = problem.map(|p| format!("<p class=\"error\">{}</p>", esc(p))).unwrap_or_default();
    let body = format!(
        "{problem}<p>This console needs its access token (<code>console.access_token</code>).</p>\
         <form method=\"post\" action=\"/login\"><input type=\"password\" name=\"token\" autocomplete=\"current-password\" \
         size=\"40\" aria-label=\"access token\"> <button type=\"submit\">Sign in</button></form>"
    );
    axum::response::Html(page("Sign in", "", &shared.namespace.to_string(), None, &body))
}

/// The actor a request acts as, or why it may not act.
pub(crate) fn actor(shared: &Shared, headers: &HeaderMap) -> Result<String, String> {
    match &shared.settings.actor {
        Some(ActorSource::Name(name)) => actor_name(name),
        Some(ActorSource::Header(name)) => {
            let value = headers.get(name.as_str()).ok_or_else(|| {
                format!("the request has no {name} header to name its actor: an action is never anonymous")
            })?;
            let value = value.to_str().map_err(|_| format!("the {name} header is not text"))?;
            actor_name(value).map_err(|e| format!("the {name} header: {e}"))
        }
        None => Err("no actor is configured (console.actor_header or console.actor)".to_owned()),
    }
}

/// What the header shows as the actor: the configured name, the header's value, or which
/// header is expected.
pub(crate) fn shown_actor(shared: &Shared, headers: &HeaderMap) -> Option<String> {
    if !shared.settings.actions {
        return None;
    }
    Some(actor(shared, headers).unwrap_or_else(|_| match &shared.settings.actor {
        Some(ActorSource::Header(name)) => format!("no {name} header"),
        _ => "no actor".to_owned(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_console_without_a_token_answers_only_to_its_own_host_names_obs_3() {
        let listen: std::net::SocketAddr = "127.0.0.1:9188".parse().unwrap();
        for host in
            ["127.0.0.1:9188", "127.0.0.1", "localhost:9188", "LOCALHOST", "[::1]:9188", "127.0.0.2:80"]
        {
            assert!(host_allowed(host, listen), "{host}");
        }
        for host in [
            "evil.example:9188",
            "evil.example",
            "",
            "10.0.0.1:9188",
            "[fe80::1]:9188",
            "localhost.evil:9188",
        ] {
            assert!(!host_allowed(host, listen), "{host}");
        }
    }

    #[test]
    fn settings_never_show_the_access_token_obs_3() {
        let mut settings = crate::settings::ConsoleSettings::new("127.0.0.1:9188".parse().unwrap());
        settings.access_token = Some("s3cret-token-of-16-chars".to_owned());
        let shown = format!("{settings:?}");
        assert!(!shown.contains("s3cret") && shown.contains("<redacted>"), "{shown}");
    }

    #[test]
    fn tokens_are_read_from_the_bearer_header_or_the_cookie() {
        let mut headers = HeaderMap::new();
        assert_eq!(presented(&headers), None);
        headers.insert(header::COOKIE, format!("a=b; {COOKIE}=tok123").parse().unwrap());
        assert_eq!(presented(&headers).as_deref(), Some("tok123"));
        headers.insert(header::AUTHORIZATION, "Bearer other".parse().unwrap());
        assert_eq!(presented(&headers).as_deref(), Some("other"));
        assert!(same("abc", "abc") && !same("abc", "abd") && !same("abc", "ab"));
        assert_ne!(secret(), secret());
    }
}
