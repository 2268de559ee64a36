//! The server's router: the pages and the JSON endpoints behind the guard, which runs first on
//! every request ([`crate::guard::check`]) and hands its `Caller` to the handlers; the size
//! limit on bodies; and a handler's panic answered as 500 rather than a dropped connection.

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use futures::FutureExt;
use http::{header, HeaderValue, StatusCode};

use crate::api::BODY_LIMIT;
use crate::error::ApiError;
use crate::guard::Refusal;
use crate::state::AppState;

pub fn router(state: Arc<AppState>) -> Router {
    crate::pages::routes()
        .merge(crate::api::routes())
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(state.clone(), guarded))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(state)
}

async fn not_found(uri: http::Uri) -> ApiError {
    ApiError::not_found(format!("no such endpoint: {}", uri.path()))
}

/// The guard, before any handler; the caller it finds goes to the handler as an extension.
/// A handler that panics answers 500 rather than dropping the connection.
async fn guarded(State(state): State<Arc<AppState>>, mut req: Request, next: Next) -> Response {
    let mut response = match crate::guard::check(&state, &req) {
        Err(Refusal::Api(error)) => error.into_response(),
        Err(Refusal::Login) => crate::pages::login_page(StatusCode::UNAUTHORIZED, None),
        Ok(caller) => {
            req.extensions_mut().insert(caller);
            match std::panic::AssertUnwindSafe(next.run(req))
                .catch_unwind()
                .await
            {
                Ok(response) => response,
                Err(panic) => {
                    let message = crate::jobs::panic_message(&*panic);
                    tracing::error!("a request handler panicked: {message}");
                    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal error")
                        .into_response()
                }
            }
        }
    };
    // The login URL carries the token: no page passes its address to another origin.
    // (`no-referrer` would also make a browser send `Origin: null` with this server's own
    // form posts, which the cross-site rule refuses.)
    response.headers_mut().insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    response
}
