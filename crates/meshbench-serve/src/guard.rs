//! The server's security rules, in one place, applied by [`check`] before any handler:
//!
//! - **Host.** Only the server's own names are answered: `127.0.0.1`, `localhost` and `[::1]`
//!   with its port, the address it listens on, and names given with `--allowed-host`. Any
//!   other `Host` (or HTTP/2 `:authority`) gets 421 on every route, before authentication:
//!   a page whose name was rebound to 127.0.0.1 sends its own name, and is refused.
//! - **Authentication**, on every listener, loopback included. A script sends the token
//!   (`Authorization: Bearer`); a browser trades it once at `/login` (the form, or the URL
//!   serve prints) for a session ([`crate::sessions`]). Without either: 401 (JSON for the
//!   API, the login page, which carries no CSRF token, for pages).
//! - **Cross-site requests.** A browser request whose `Origin` is not this server, or whose
//!   `Sec-Fetch-Site` says another site, is refused outright.
//! - **CSRF.** A request that changes something (any method but GET and HEAD) made with a
//!   session must say where it comes from (`Origin` or `Sec-Fetch-Site: same-origin`) and
//!   carry the session's CSRF token: the `x-csrf-token` header, or a form's `csrf` field,
//!   which the form's handler checks ([`check_form_csrf`]). The JSON routes (`POST /api/...`)
//!   take `application/json` only (415 otherwise), so no form can reach them. A bearer
//!   request needs neither: no browser adds that header on its own.
//! - **Paths.** Run ids and file names are matched against what the results directory
//!   lists ([`crate::catalog`]); nothing from a request is joined to a path unchecked.

use std::net::SocketAddr;

use axum::extract::Request;
use http::{header, HeaderMap, Method, StatusCode};

use crate::error::ApiError;
use crate::sessions::Caller;
use crate::state::AppState;
use crate::Error;

/// Where the CSRF token goes in a form and in a header.
pub const CSRF_FIELD: &str = "csrf";
pub const CSRF_HEADER: &str = "x-csrf-token";
/// A token shorter than this is guessable.
const MIN_TOKEN_LEN: usize = 16;

/// The token a server uses: the one given (checked), or, on loopback, a random one that serve
/// prints as a login URL. Beyond loopback the operator must choose it.
pub fn token_for(listen: SocketAddr, given: Option<String>) -> Result<String, Error> {
    match given {
        Some(t) if !valid_token(&t) => Err(Error::WeakToken { min: MIN_TOKEN_LEN }),
        Some(t) => Ok(t),
        None if !listen.ip().is_loopback() => Err(Error::TokenRequired { listen }),
        None => Ok(crate::sessions::random_token()),
    }
}

fn valid_token(token: &str) -> bool {
    token.len() >= MIN_TOKEN_LEN && token.bytes().all(|b| b.is_ascii_graphic() && b != b';')
}

/// The `Host` values this server answers to, lowercase.
pub fn allowed_hosts(listen: SocketAddr, extra: &[String]) -> Vec<String> {
    let port = listen.port();
    let mut hosts = vec![
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
    ];
    if !listen.ip().is_unspecified() {
        hosts.push(listen.to_string());
    }
    for name in extra {
        let name = name.trim().to_ascii_lowercase();
        if has_port(&name) {
            hosts.push(name);
        } else {
            // A name alone: as a browser sends it on the server's port, and bare (a proxy in
            // front on port 80 or 443).
            hosts.push(format!("{name}:{port}"));
            hosts.push(name);
        }
    }
    hosts.sort();
    hosts.dedup();
    hosts
}

/// Whether a `--allowed-host` value names its port: `name:8090`, `[fd00::1]:8090`.
fn has_port(name: &str) -> bool {
    let after = match name.strip_prefix('[') {
        Some(v6) => v6.split_once("]:").map(|(_, port)| port),
        None => name.split_once(':').map(|(_, port)| port),
    };
    after.is_some_and(|port| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()))
}

/// The host a request names: `Host`, or HTTP/2's `:authority`; `None` when it names none,
/// or more than one (two `Host` headers, or an absolute-form target whose authority is not
/// its `Host`), which no browser sends and a confused proxy might.
fn requested_host(req: &Request) -> Option<String> {
    let mut hosts = req.headers().get_all(header::HOST).iter();
    let host = hosts.next();
    if hosts.next().is_some() {
        return None;
    }
    let authority = req
        .uri()
        .authority()
        .map(|a| a.as_str().to_ascii_lowercase());
    match (
        host.map(|h| h.to_str().map(str::to_ascii_lowercase)),
        authority,
    ) {
        (Some(Ok(host)), Some(authority)) if host != authority => None,
        (Some(Ok(host)), _) => Some(host),
        (Some(Err(_)), _) => None,
        (None, authority) => authority,
    }
}

/// Equal without a timing difference on where they differ.
pub fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// Paths anyone may load: the login page and what it needs.
fn public(path: &str) -> bool {
    matches!(path, "/login" | "/static/app.css")
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

pub fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// Who the request comes from: the token as a bearer, or a live session's cookie.
pub fn caller(state: &AppState, headers: &HeaderMap) -> Caller {
    if bearer(headers).is_some_and(|given| same_secret(given, &state.token)) {
        return Caller::Bearer;
    }
    cookie(headers, &state.cookie_name)
        .and_then(|id| state.sessions.find(id))
        .unwrap_or(Caller::Anonymous)
}

/// Why the guard answered instead of a handler.
pub enum Refusal {
    Api(ApiError),
    /// A page asked for without credentials: the login page, with 401.
    Login,
}

/// The rules, in order: host, authentication, cross-site, content type, CSRF.
pub fn check(state: &AppState, req: &Request) -> Result<Caller, Refusal> {
    let path = req.uri().path();
    let api = path.starts_with("/api/");
    let host = requested_host(req).unwrap_or_default();
    if !state.allowed_hosts.contains(&host) {
        return Err(Refusal::Api(ApiError::new(
            StatusCode::MISDIRECTED_REQUEST,
            format!(
                "Host {host:?} is not a name of this server (known: {}); start it with --allowed-host NAME to answer to another",
                state.allowed_hosts.join(", ")
            ),
        ))
        );
    }
    let headers = req.headers();
    let caller = caller(state, headers);
    if caller == Caller::Anonymous && !public(path) {
        return Err(if api {
            Refusal::Api(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "missing or wrong token: send Authorization: Bearer <token>, or log in at /login",
            ))
        } else {
            Refusal::Login
        });
    }
    if let Some(why) = cross_site(headers) {
        return Err(Refusal::Api(ApiError::new(StatusCode::FORBIDDEN, why)));
    }
    let changes = !matches!(*req.method(), Method::GET | Method::HEAD);
    if changes && api && *req.method() == Method::POST && !is_json(headers) {
        return Err(Refusal::Api(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "this endpoint takes a JSON body: send Content-Type: application/json",
        )));
    }
    if changes {
        if let Caller::Session { csrf, .. } = &caller {
            if !says_where_from(headers) {
                return Err(Refusal::Api(ApiError::new(
                    StatusCode::FORBIDDEN,
                    "a browser request that changes something must carry Origin or Sec-Fetch-Site; scripts send the bearer token",
                ))
                );
            }
            let header_token = headers
                .get(CSRF_HEADER)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|t| same_secret(t, csrf));
            // A form's field is checked by its handler, which has read the body.
            let form_checks_its_field = is_form(headers) && !api;
            if !header_token && !form_checks_its_field {
                return Err(Refusal::Api(ApiError::new(
                    StatusCode::FORBIDDEN,
                    "a request that changes something needs this session's CSRF token (the x-csrf-token header or the form's csrf field)",
                ))
                );
            }
        }
    }
    Ok(caller)
}

/// Whether a browser said where the request comes from (checked to be this server by
/// [`cross_site`]).
fn says_where_from(headers: &HeaderMap) -> bool {
    headers.contains_key(header::ORIGIN)
        || headers
            .get("sec-fetch-site")
            .is_some_and(|v| v.as_bytes() == b"same-origin")
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|t| t.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
}

pub fn is_form(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|t| t.to_ascii_lowercase())
        .is_some_and(|t| {
            t.starts_with("application/x-www-form-urlencoded")
                || t.starts_with("multipart/form-data")
        })
}

/// A form's CSRF field, checked by the handler that read the form: a session's own token,
/// or none for a bearer caller.
pub fn check_form_csrf(caller: &Caller, given: Option<&str>) -> Result<(), ApiError> {
    match (caller, given) {
        (Caller::Bearer, _) => Ok(()),
        (Caller::Session { csrf, .. }, Some(t)) if same_secret(t, csrf) => Ok(()),
        _ => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "the form's CSRF token is missing or stale: reload the page and submit again",
        )),
    }
}

/// Why a request comes from another site, if it does.
fn cross_site(headers: &HeaderMap) -> Option<String> {
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        if site == "cross-site" {
            return Some("cross-site requests are refused".to_owned());
        }
    }
    // An origin that cannot be read, or no host to compare it with, is not this server.
    let origin = headers.get(header::ORIGIN)?;
    let Ok(origin) = origin.to_str() else {
        return Some("an unreadable Origin header is refused".to_owned());
    };
    if origin == "null" {
        return Some("requests from an opaque origin are refused".to_owned());
    }
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return Some(format!("origin {origin} with no Host to compare it with"));
    };
    let origin_host = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .unwrap_or(origin);
    (!origin_host.eq_ignore_ascii_case(host))
        .then(|| format!("origin {origin} is not this server ({host})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_makes_its_own_token_and_beyond_it_one_must_be_given() {
        let loopback: SocketAddr = "127.0.0.1:8090".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:8090".parse().unwrap();
        let made = token_for(loopback, None).unwrap();
        assert!(valid_token(&made) && made.len() >= 32, "{made}");
        assert_ne!(made, token_for(loopback, None).unwrap());
        assert!(token_for("[::1]:8090".parse().unwrap(), None).is_ok());
        assert!(matches!(
            token_for(any, None),
            Err(Error::TokenRequired { .. })
        ));
        assert!(token_for(any, Some("a-long-enough-token-42".into())).is_ok());
        assert!(matches!(
            token_for(any, Some("short".into())),
            Err(Error::WeakToken { .. })
        ));
        assert!(matches!(
            token_for(loopback, Some("has a space in it, long".into())),
            Err(Error::WeakToken { .. })
        ));
    }

    #[test]
    fn the_hosts_allowed_are_the_servers_own_names() {
        let hosts = allowed_hosts(
            "127.0.0.1:8090".parse().unwrap(),
            &[
                "Bench.Example".into(),
                "10.0.0.5:9000".into(),
                "[fd00::1]:80".into(),
            ],
        );
        for ok in [
            "127.0.0.1:8090",
            "localhost:8090",
            "[::1]:8090",
            "bench.example:8090",
            "bench.example",
            "10.0.0.5:9000",
            "[fd00::1]:80",
        ] {
            assert!(hosts.iter().any(|h| h == ok), "{ok} in {hosts:?}");
        }
        for refused in [
            "rebind.evil.example:8090",
            "127.0.0.1:8091",
            "localhost",
            "127.0.0.1",
        ] {
            assert!(!hosts.iter().any(|h| h == refused), "{refused}");
        }
        let any = allowed_hosts("0.0.0.0:8090".parse().unwrap(), &[]);
        assert!(!any.iter().any(|h| h.starts_with("0.0.0.0")), "{any:?}");
    }

    #[test]
    fn another_sites_origin_is_refused_and_ours_is_not() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, "127.0.0.1:8090".parse().unwrap());
        assert!(cross_site(&headers).is_none());
        headers.insert(header::ORIGIN, "http://127.0.0.1:8090".parse().unwrap());
        assert!(cross_site(&headers).is_none());
        headers.insert(header::ORIGIN, "https://evil.example".parse().unwrap());
        assert!(cross_site(&headers).is_some());
        headers.insert(header::ORIGIN, "null".parse().unwrap());
        assert!(cross_site(&headers).is_some());
        let mut fetch = HeaderMap::new();
        fetch.insert("sec-fetch-site", "cross-site".parse().unwrap());
        assert!(cross_site(&fetch).is_some());
    }

    #[test]
    fn cookies_are_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            "a=1; meshbench_token=secret-value; b=2".parse().unwrap(),
        );
        assert_eq!(cookie(&headers, "meshbench_token"), Some("secret-value"));
        assert_eq!(cookie(&headers, "c"), None);
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "abcd"));
    }

    proptest::proptest! {
        /// Any header a client sends is read without a panic, and another site is never
        /// taken for this one.
        #[test]
        fn headers_from_anyone_are_read_safely(cookie_text in "\\PC{0,60}", origin in "\\PC{0,40}") {
            let mut headers = HeaderMap::new();
            headers.insert(header::HOST, "127.0.0.1:8090".parse().unwrap());
            if let Ok(value) = cookie_text.parse() {
                headers.insert(header::COOKIE, value);
            }
            let _ = cookie(&headers, "meshbench_token");
            if let Ok(value) = origin.parse() {
                headers.insert(header::ORIGIN, value);
                let ours = origin == "http://127.0.0.1:8090" || origin == "https://127.0.0.1:8090" || origin == "127.0.0.1:8090";
                proptest::prop_assert_eq!(cross_site(&headers).is_none(), ours);
            }
        }
    }
}
