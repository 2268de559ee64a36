//! The zero-trust policy engine, one for every enforcement point (sidecar, node agent) and for
//! the verifier that derives expected outcomes.
//!
//! A policy file ([`PolicyFile`], YAML) declares peer authentication per namespace or workload
//! (STRICT, PERMISSIVE, DISABLE), authorization policies (ALLOW and DENY rules over source
//! principals and namespaces, destination ports, and at L7 methods and paths), and a default
//! inbound policy for workloads no ALLOW policy selects, like Linkerd's.
//!
//! The rule that makes identity-based policy safe: an identity condition (principals,
//! namespaces and their negations) is never satisfied by a plaintext peer. In an ALLOW rule
//! that means no match; in a DENY rule, a condition that cannot be evaluated denies. Lacking
//! an identity therefore never helps a peer: the trap behind Istio's advisories on
//! `notNamespaces` and the bypass E3 observed.

mod error;
mod eval;
mod file;
mod matcher;

pub use error::Error;
pub use eval::{Decision, Peer, Policy, Request};
pub use file::{
    Action, AuthorizationPolicy, DefaultInbound, From, PeerAuthentication, PeerAuthenticationMode,
    PolicyFile, Rule, To,
};
pub use matcher::Pattern;
