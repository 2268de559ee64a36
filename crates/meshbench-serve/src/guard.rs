//! The server's security rules, in one place:
//!
//! - **Exposure.** Loopback by default; any other address needs a token.
//! - **Authentication.** With a token, every request but the login page and the stylesheet
//!   carries it: `Authorization: Bearer <token>`, or the `meshbench_token` cookie the login
//!   page sets (HttpOnly, SameSite=Strict). Without it: 401 (JSON for the API, the login page
//!   for pages).
//! - **CSRF.** A POST (the one method that changes something and that another site's page can
//!   send without a CORS preflight; DELETE cannot be sent across origins without one, which
//!   this server never answers) must come from this server's own pages or from a script: it
//!   carries the server's CSRF token (the `x-csrf-token` header or the `csrf` form field), or
//!   it is JSON or bearer-authenticated. And a browser request whose `Origin` or
//!   `Sec-Fetch-Site` says another site is refused outright, on loopback too (a web page may
//!   post to 127.0.0.1).
//! - **Paths.** Run ids and file names are matched against what the results directory
//!   lists ([`crate::catalog`]); nothing from a request is joined to a path unchecked.

use std::net::SocketAddr;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{header, HeaderMap, Method, StatusCode};

use crate::state::AppState;
use crate::Error;

/// The cookie the login page sets.
pub const TOKEN_COOKIE: &str = "meshbench_token";
/// Where the CSRF token goes in a form and in a header.
pub const CSRF_FIELD: &str = "csrf";
pub const CSRF_HEADER: &str = "x-csrf-token";
/// A token shorter than this is guessable.
const MIN_TOKEN_LEN: usize = 16;

pub fn check_exposure(listen: SocketAddr, token: Option<&str>) -> Result<(), Error> {
    match token {
        Some(t) if !valid_token(t) => Err(Error::WeakToken { min: MIN_TOKEN_LEN }),
        None if !listen.ip().is_loopback() => Err(Error::TokenRequired { listen }),
        _ => Ok(()),
    }
}

fn valid_token(token: &str) -> bool {
    token.len() >= MIN_TOKEN_LEN && token.bytes().all(|b| b.is_ascii_graphic() && b != b';')
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

/// Whether the request carries the server's token (always true without one).
pub fn authenticated(state: &AppState, headers: &HeaderMap) -> bool {
    let Some(token) = state.token.as_deref() else {
        return true;
    };
    [bearer(headers), cookie(headers, TOKEN_COOKIE)]
        .into_iter()
        .flatten()
        .any(|given| same_secret(given, token))
}

/// Authentication and the cross-site rules, before any handler.
pub async fn middleware(
    State(state): State<std::sync::Arc<AppState>>,
    req: Request,
    next: Next,
) -> Response {
    let path = req.uri().path().to_owned();
    let api = path.starts_with("/api/");
    if !public(&path) && !authenticated(&state, req.headers()) {
        return if api {
            crate::api::ApiError::new(
                StatusCode::UNAUTHORIZED,
                "missing or wrong token: send Authorization: Bearer <token>",
            )
            .into_response()
        } else {
            crate::pages::login_page(&state, StatusCode::UNAUTHORIZED, None)
        };
    }
    if let Some(why) = cross_site(req.headers()) {
        return crate::api::ApiError::new(StatusCode::FORBIDDEN, why).into_response();
    }
    let changes = *req.method() == Method::POST;
    if changes && !path_exempt_from_csrf(&path) && !csrf_safe(&state, req.headers()) {
        // A form's field is checked by its handler, which has read the body.
        if !is_form(req.headers()) {
            return crate::api::ApiError::new(
                StatusCode::FORBIDDEN,
                "a request that changes something needs the x-csrf-token header, a JSON body or a bearer token",
            )
            .into_response();
        }
    }
    next.run(req).await
}

/// The login form cannot hold a CSRF token before anyone has logged in; it changes nothing but
/// the caller's own cookie.
fn path_exempt_from_csrf(path: &str) -> bool {
    path == "/login"
}

/// Requests a browser cannot send from another site without a CORS preflight.
fn csrf_safe(state: &AppState, headers: &HeaderMap) -> bool {
    let header_token = headers
        .get(CSRF_HEADER)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| same_secret(t, &state.csrf));
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| {
            t.trim_start()
                .to_ascii_lowercase()
                .starts_with("application/json")
        });
    header_token || json || bearer(headers).is_some()
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

/// A form's CSRF field, checked by the handler that read the form.
pub fn check_form_csrf(state: &AppState, given: Option<&str>) -> Result<(), crate::api::ApiError> {
    match given {
        Some(t) if same_secret(t, &state.csrf) => Ok(()),
        _ => Err(crate::api::ApiError::new(
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
    (origin_host != host).then(|| format!("origin {origin} is not this server ({host})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_may_go_without_a_token() {
        let loopback: SocketAddr = "127.0.0.1:8090".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:8090".parse().unwrap();
        assert!(check_exposure(loopback, None).is_ok());
        assert!(check_exposure("[::1]:8090".parse().unwrap(), None).is_ok());
        assert!(matches!(
            check_exposure(any, None),
            Err(Error::TokenRequired { .. })
        ));
        assert!(check_exposure(any, Some("a-long-enough-token-42")).is_ok());
        assert!(matches!(
            check_exposure(any, Some("short")),
            Err(Error::WeakToken { .. })
        ));
        assert!(matches!(
            check_exposure(loopback, Some("has a space in it, long")),
            Err(Error::WeakToken { .. })
        ));
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
        assert_eq!(cookie(&headers, TOKEN_COOKIE), Some("secret-value"));
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
            let _ = cookie(&headers, TOKEN_COOKIE);
            if let Ok(value) = origin.parse() {
                headers.insert(header::ORIGIN, value);
                let ours = origin == "http://127.0.0.1:8090" || origin == "https://127.0.0.1:8090" || origin == "127.0.0.1:8090";
                proptest::prop_assert_eq!(cross_site(&headers).is_none(), ours);
            }
        }
    }
}
