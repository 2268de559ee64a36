//! Who is asking: login sessions (as Grafana keeps them) and the login rate limit. The token
//! is the credential; a browser trades it once for a session: a random id in an HttpOnly,
//! SameSite=Strict cookie, with an expiry and a CSRF token of its own, revoked by logging
//! out. The token itself is never a cookie, and no page carries a CSRF token before login.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rand::Rng;

/// Sessions kept at once; a login beyond that ends the session closest to expiring.
pub const MAX_SESSIONS: usize = 1_024;
/// Failed logins allowed per [`LOGIN_WINDOW`], from anyone; more get 429 until the window
/// has moved on (a login is refused before the token is compared, so guessing gains nothing).
pub const MAX_FAILED_LOGINS: usize = 10;
pub const LOGIN_WINDOW: Duration = Duration::from_secs(60);
/// A session's life by default (`--session-ttl`).
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(12 * 3600);

/// The caller of one request, as the guard found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// Not authenticated: only the login page and the stylesheet are served.
    Anonymous,
    /// A script with the token (`Authorization: Bearer`): no browser sends it by itself.
    Bearer,
    /// A browser logged in: its session id and that session's CSRF token.
    Session { id: String, csrf: String },
}

impl Caller {
    /// The CSRF token pages embed: only a logged-in browser has one.
    pub fn csrf(&self) -> Option<&str> {
        match self {
            Caller::Session { csrf, .. } => Some(csrf),
            _ => None,
        }
    }

    /// What the per-client caps count by.
    pub fn key(&self) -> &str {
        match self {
            Caller::Anonymous => "anonymous",
            Caller::Bearer => "bearer",
            Caller::Session { id, .. } => id,
        }
    }
}

struct Session {
    csrf: String,
    expires: Instant,
}

pub struct Sessions {
    ttl: Duration,
    live: Mutex<HashMap<String, Session>>,
    failed_logins: Mutex<VecDeque<Instant>>,
}

impl Sessions {
    pub fn new(ttl: Duration) -> Self {
        Sessions {
            ttl,
            live: Mutex::new(HashMap::new()),
            failed_logins: Mutex::new(VecDeque::new()),
        }
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// A new session: its id (for the cookie) and the caller it makes.
    pub fn open(&self) -> (String, Caller) {
        let now = Instant::now();
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        live.retain(|_, s| s.expires > now);
        if live.len() >= MAX_SESSIONS {
            if let Some(oldest) = live
                .iter()
                .min_by_key(|(_, s)| s.expires)
                .map(|(id, _)| id.clone())
            {
                live.remove(&oldest);
            }
        }
        let (id, csrf) = (random_token(), random_token());
        live.insert(
            id.clone(),
            Session {
                csrf: csrf.clone(),
                expires: now + self.ttl,
            },
        );
        (id.clone(), Caller::Session { id, csrf })
    }

    /// The live session `id` names, if any.
    pub fn find(&self, id: &str) -> Option<Caller> {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        let session = live.get(id)?;
        if session.expires <= Instant::now() {
            live.remove(id);
            return None;
        }
        Some(Caller::Session {
            id: id.to_owned(),
            csrf: session.csrf.clone(),
        })
    }

    pub fn close(&self, id: &str) {
        self.live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
    }

    /// Whether a login may be tried now; `Err` is how long until one may.
    pub fn login_allowed(&self) -> Result<(), Duration> {
        let now = Instant::now();
        let mut failed = self.failed_logins.lock().unwrap_or_else(|p| p.into_inner());
        while failed
            .front()
            .is_some_and(|&t| now.duration_since(t) >= LOGIN_WINDOW)
        {
            failed.pop_front();
        }
        match failed.front() {
            Some(&first) if failed.len() >= MAX_FAILED_LOGINS => {
                Err(LOGIN_WINDOW.saturating_sub(now.duration_since(first)))
            }
            _ => Ok(()),
        }
    }

    pub fn login_failed(&self) {
        let mut failed = self.failed_logins.lock().unwrap_or_else(|p| p.into_inner());
        failed.push_back(Instant::now());
        if failed.len() > MAX_FAILED_LOGINS {
            failed.pop_front();
        }
    }
}

/// 192 random bits, hex: a token, a session id, a CSRF token.
pub fn random_token() -> String {
    let bytes: [u8; 24] = rand::rng().random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_has_its_own_csrf_token_and_ends_when_closed_or_expired() {
        let sessions = Sessions::new(Duration::from_secs(60));
        let (a, caller_a) = sessions.open();
        let (b, caller_b) = sessions.open();
        assert_ne!(a, b);
        assert_ne!(caller_a.csrf(), caller_b.csrf());
        assert_eq!(sessions.find(&a), Some(caller_a));
        sessions.close(&a);
        assert_eq!(sessions.find(&a), None);
        assert!(sessions.find(&b).is_some());
        assert_eq!(sessions.find("not-a-session"), None);

        let short = Sessions::new(Duration::ZERO);
        let (id, _) = short.open();
        assert_eq!(short.find(&id), None, "expired at once");
    }

    #[test]
    fn sessions_are_capped_and_failed_logins_limited() {
        let sessions = Sessions::new(Duration::from_secs(60));
        let (first, _) = sessions.open();
        for _ in 1..MAX_SESSIONS + 5 {
            sessions.open();
        }
        assert_eq!(sessions.live.lock().unwrap().len(), MAX_SESSIONS, "capped");
        assert_eq!(sessions.find(&first), None, "the oldest went first");
        for _ in 0..MAX_FAILED_LOGINS {
            assert!(sessions.login_allowed().is_ok());
            sessions.login_failed();
        }
        let wait = sessions.login_allowed().unwrap_err();
        assert!(
            wait <= LOGIN_WINDOW && wait > Duration::from_secs(50),
            "{wait:?}"
        );
    }
}
