//! The policy engine's semantics, including the traps identity-based policy falls into when
//! plaintext peers are evaluated naively.

use meshbench_identity::SpiffeId;
use meshbench_policy::{Peer, PeerAuthenticationMode, Policy, Request};

/// E3's zero-trust rules: STRICT mTLS in the application namespace, deny other namespaces,
/// only the experimenter's service account may call the calculator.
fn e3_rules() -> String {
    meshbench_topology::e3::zero_trust_policy("cluster.local")
}

fn svid(ns: &str, sa: &str) -> Peer {
    Peer::Authenticated {
        id: SpiffeId::for_workload("cluster.local", ns, sa).unwrap(),
        source_ip: None,
    }
}

fn plaintext() -> Peer {
    Peer::Plaintext { source_ip: None }
}

fn allowed(policy: &Policy, ns: &str, workload: &str, peer: &Peer) -> bool {
    policy
        .authorize(&Request {
            namespace: ns,
            workload,
            port: 8080,
            peer,
            http: None,
        })
        .allowed
}

#[test]
fn e3_zero_trust_rules_admit_only_the_experimenter_to_the_calculator() {
    let policy = Policy::from_yaml(&e3_rules()).unwrap();
    assert!(allowed(
        &policy,
        "app",
        "calculator",
        &svid("app", "experimenter")
    ));
    assert!(!allowed(
        &policy,
        "app",
        "calculator",
        &svid("app", "security-checker")
    ));
    assert!(!allowed(
        &policy,
        "app",
        "calculator",
        &svid("other", "experimenter")
    ));
    // Another workload in the namespace: no ALLOW policy selects it, same-namespace peers pass.
    assert!(allowed(
        &policy,
        "app",
        "security-checker",
        &svid("app", "security-checker")
    ));
    assert!(!allowed(
        &policy,
        "app",
        "security-checker",
        &svid("other", "security-checker")
    ));

    let d = policy.authorize(&Request {
        namespace: "app",
        workload: "calculator",
        port: 8080,
        peer: &svid("other", "x"),
        http: None,
    });
    assert_eq!(d.reason, "denied by DENY policy deny-other-namespaces");
}

#[test]
fn an_unmeshed_workload_under_the_experimenters_account_does_not_reach_the_calculator() {
    // E3 observed this bypass: the service account name is not an identity without mTLS.
    let strict = Policy::from_yaml(&e3_rules()).unwrap();
    let d = strict.authorize(&Request {
        namespace: "app",
        workload: "calculator",
        port: 8080,
        peer: &plaintext(),
        http: None,
    });
    assert!(!d.allowed);
    assert!(d.reason.contains("STRICT"), "{}", d.reason);

    // Even where mTLS is only PERMISSIVE, a principal-based ALLOW cannot match a plaintext peer.
    let permissive =
        Policy::from_yaml(&e3_rules().replace("mode: STRICT", "mode: PERMISSIVE")).unwrap();
    assert!(!allowed(&permissive, "app", "calculator", &plaintext()));
}

#[test]
fn a_plaintext_peer_never_satisfies_a_negated_identity_condition() {
    // "Everyone except namespace other" must not include peers with no namespace at all.
    let allow_not_other = Policy::from_yaml(
        r#"
authorization:
  - name: allow-all-but-other
    namespace: app
    action: ALLOW
    rules:
      - from: { not_namespaces: [other] }
"#,
    )
    .unwrap();
    assert_eq!(
        allow_not_other.peer_authentication("app", "api"),
        PeerAuthenticationMode::Permissive
    );
    assert!(allowed(&allow_not_other, "app", "api", &svid("app", "web")));
    assert!(!allowed(
        &allow_not_other,
        "app",
        "api",
        &svid("other", "web")
    ));
    assert!(
        !allowed(&allow_not_other, "app", "api", &plaintext()),
        "the not-namespace trap"
    );

    let allow_not_principal = Policy::from_yaml(
        r#"
authorization:
  - name: allow-all-but-intruder
    namespace: app
    action: ALLOW
    rules:
      - from: { not_principals: [cluster.local/ns/app/sa/intruder] }
"#,
    )
    .unwrap();
    assert!(allowed(
        &allow_not_principal,
        "app",
        "api",
        &svid("app", "web")
    ));
    assert!(!allowed(&allow_not_principal, "app", "api", &plaintext()));

    // A DENY that cannot be evaluated denies: lacking an identity never escapes a deny.
    let deny_not_app = Policy::from_yaml(
        r#"
authorization:
  - name: deny-outside-app
    namespace: app
    action: DENY
    rules:
      - from: { not_namespaces: [app] }
"#,
    )
    .unwrap();
    assert!(allowed(&deny_not_app, "app", "api", &svid("app", "web")));
    assert!(!allowed(&deny_not_app, "app", "api", &svid("other", "web")));
    assert!(!allowed(&deny_not_app, "app", "api", &plaintext()));
}

#[test]
fn http_conditions_apply_at_l7_and_fail_safe_at_l4() {
    let policy = Policy::from_yaml(
        r#"
authorization:
  - name: deny-admin
    namespace: app
    workload: api
    action: DENY
    rules:
      - to: { paths: ["/admin/*"] }
  - name: post-add-only
    namespace: app
    workload: api
    action: ALLOW
    rules:
      - to: { methods: [POST], paths: ["/add", "/api/*"], ports: [8080] }
"#,
    )
    .unwrap();
    let peer = svid("app", "web");
    let at = |http: Option<(&'static str, &'static str)>, port: u16| {
        policy
            .authorize(&Request {
                namespace: "app",
                workload: "api",
                port,
                peer: &peer,
                http,
            })
            .allowed
    };
    assert!(at(Some(("POST", "/add")), 8080));
    assert!(at(Some(("POST", "/api/v1/x")), 8080));
    assert!(!at(Some(("GET", "/add")), 8080));
    assert!(!at(Some(("POST", "/add")), 9090), "wrong port");
    assert!(!at(Some(("POST", "/admin/users")), 8080));
    // At L4 the DENY on a path cannot be checked, so it denies; the ALLOW cannot match either.
    assert!(!at(None, 8080));
}

#[test]
fn default_inbound_policies_follow_linkerd() {
    let with_default = |default: &str| {
        Policy::from_yaml(&format!(
            "default_inbound: {default}\ncluster_networks: [10.0.0.0/8]\n"
        ))
        .unwrap()
    };
    let in_cluster = Peer::Plaintext {
        source_ip: Some("10.1.2.3".parse().unwrap()),
    };
    let outside = Peer::Plaintext {
        source_ip: Some("192.0.2.7".parse().unwrap()),
    };
    let authenticated = svid("app", "web");

    let p = with_default("all-unauthenticated");
    assert!(allowed(&p, "app", "api", &outside) && allowed(&p, "app", "api", &authenticated));
    let p = with_default("all-authenticated");
    assert!(!allowed(&p, "app", "api", &in_cluster) && allowed(&p, "app", "api", &authenticated));
    let p = with_default("cluster-authenticated");
    assert!(allowed(&p, "app", "api", &in_cluster));
    assert!(!allowed(&p, "app", "api", &outside));
    assert!(allowed(&p, "app", "api", &authenticated));
    let p = with_default("deny");
    assert!(!allowed(&p, "app", "api", &authenticated));
}

#[test]
fn the_most_specific_peer_authentication_wins() {
    let policy = Policy::from_yaml(
        r#"
peer_authentication:
  - { name: mesh, mode: STRICT }
  - { name: legacy, namespace: legacy, mode: PERMISSIVE }
  - { name: legacy-db, namespace: legacy, workload: db, mode: DISABLE }
"#,
    )
    .unwrap();
    assert_eq!(
        policy.peer_authentication("app", "x"),
        PeerAuthenticationMode::Strict
    );
    assert_eq!(
        policy.peer_authentication("legacy", "x"),
        PeerAuthenticationMode::Permissive
    );
    assert_eq!(
        policy.peer_authentication("legacy", "db"),
        PeerAuthenticationMode::Disable
    );
    assert!(
        !allowed(&policy, "legacy", "db", &svid("legacy", "x")),
        "DISABLE refuses mTLS"
    );
    assert!(allowed(&policy, "legacy", "db", &plaintext()));
}

#[test]
fn bad_policies_are_rejected_with_the_rule_and_field_named() {
    let err = |yaml: &str| Policy::from_yaml(yaml).unwrap_err().to_string();

    let e = err("authorization:\n  - name: x\n    namespace: app\n    action: ALLOW\n    rules:\n      - from: { principals: [\"a*b\"] }\n");
    assert!(
        e.contains(r#"authorization[0] "x": rules[0].from.principals[0]"#),
        "{e}"
    );

    let e = err("authorization:\n  - name: x\n    workload: api\n    action: DENY\n");
    assert!(e.contains("workload needs a namespace"), "{e}");

    let e = err("authorization:\n  - {name: x, namespace: a, action: ALLOW}\n  - {name: x, namespace: b, action: ALLOW}\n");
    assert!(
        e.contains(r#"authorization[1] "x""#) && e.contains("already exists"),
        "{e}"
    );

    let e = err("authorization:\n  - name: m\n    namespace: a\n    action: ALLOW\n    rules:\n      - to: { methods: [get] }\n");
    assert!(e.contains("rules[0].to.methods[0]"), "{e}");

    let e = err("authorization:\n  - name: typo\n    namespace: a\n    action: ALLOW\n    rules:\n      - form: {}\n");
    assert!(e.contains("form") && e.contains("line"), "{e}");

    let e = err("peer_authentication:\n  - { name: a, namespace: x, mode: STRICT }\n  - { name: b, namespace: x, mode: DISABLE }\n");
    assert!(
        e.contains(r#"peer_authentication[1] "b""#) && e.contains("same scope"),
        "{e}"
    );

    let e = err("default_inbound: allow-everyone\n");
    assert!(e.contains("allow-everyone"), "{e}");
}

#[test]
fn a_namespace_belongs_to_the_policys_trust_domain_only() {
    let policy = Policy::from_yaml(
        r#"
trust_domain: cluster.local
authorization:
  - name: app-only
    namespace: app
    workload: calculator
    action: ALLOW
    rules:
      - from: { namespaces: [app] }
"#,
    )
    .unwrap();
    let foreign = Peer::Authenticated {
        id: SpiffeId::for_workload("evil.example", "app", "experimenter").unwrap(),
        source_ip: None,
    };
    assert!(allowed(
        &policy,
        "app",
        "calculator",
        &svid("app", "experimenter")
    ));
    assert!(!allowed(&policy, "app", "calculator", &foreign));
    // Nor does it escape a DENY of other namespaces by having the right name in another
    // trust domain.
    let e3 = Policy::from_yaml(&e3_rules()).unwrap();
    assert!(!allowed(&e3, "app", "checker", &foreign));
    assert!(allowed(&e3, "app", "checker", &svid("app", "experimenter")));
    // The trust domain itself must be a valid one.
    let bad = Policy::from_yaml("trust_domain: Cluster Local").unwrap_err();
    assert!(bad.to_string().contains("trust_domain"), "{bad}");
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    const FIELDS: &[&str] = &[
        "principals: [cluster.local/ns/app/sa/experimenter]",
        "principals: [\"*\"]",
        "principals: [spiffe://cluster.local/ns/*]",
        "not_principals: [\"cluster.local/ns/app/*\"]",
        "namespaces: [app]",
        "not_namespaces: [app]",
        "namespaces: [\"\"]",
        "principals: []",
        "principals: 7",
        "ports: [8080]",
        "ports: [-1]",
        "ports: [99999]",
        "methods: [GET]",
        "methods: [get]",
        "paths: [\"/admin/*\"]",
        "paths: [\"*\"]",
        "paths: [\"\"]",
        "paths: [\"/a*b*c\"]",
    ];

    prop_compose! {
        /// A policy file assembled from valid and invalid fragments.
        fn policy_yaml()(
            action in prop::sample::select(&["ALLOW", "DENY", "AUDIT", ""][..]),
            mode in prop::sample::select(&["STRICT", "PERMISSIVE", "DISABLE", "strict"][..]),
            trust_domain in prop::sample::select(&["cluster.local", "evil.example", "", "A B"][..]),
            from in prop::collection::vec(prop::sample::select(FIELDS), 0..3),
            to in prop::collection::vec(prop::sample::select(FIELDS), 0..3),
        ) -> String {
            format!(
                "trust_domain: \"{trust_domain}\"\npeer_authentication:\n  - {{ name: p, namespace: app, mode: {mode} }}\n\
                 authorization:\n  - name: a\n    namespace: app\n    action: \"{action}\"\n    rules:\n      - from: {{ {} }}\n        to: {{ {} }}\n",
                from.join(", "),
                to.join(", "),
            )
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Any file either loads or is refused with an error naming where; a loaded policy
        /// decides every request, by identity or without one, without panicking, and written
        /// back as YAML reads as the same policy.
        #[test]
        fn any_policy_file_loads_or_is_refused_and_then_decides(
            yaml in policy_yaml(),
            path in "[ -~]{0,24}",
            sa in "[a-z]{1,8}",
        ) {
            match Policy::from_yaml(&yaml) {
                Ok(policy) => {
                    let again = Policy::from_yaml(&policy.to_yaml().unwrap()).unwrap();
                    prop_assert_eq!(again.file(), policy.file());
                    for peer in [svid("app", &sa), plaintext()] {
                        let _ = policy.authorize(&Request {
                            namespace: "app",
                            workload: "calculator",
                            port: 8080,
                            peer: &peer,
                            http: Some(("GET", &path)),
                        });
                        let _ = policy.admits_connection("app", "calculator", &peer);
                    }
                }
                Err(e) => prop_assert!(!e.to_string().is_empty()),
            }
        }

        #[test]
        fn no_text_panics_the_parser(text in any::<String>()) {
            let _ = Policy::from_yaml(&text);
        }
    }
}

/// A translation into another mesh's rules asks rule by rule whether a source may match,
/// leaving methods and paths to that mesh's L7 matches.
#[test]
fn a_rules_source_conditions_are_read_apart_from_its_methods_and_paths() {
    let policy = Policy::from_yaml(
        "authorization:\n\
         \x20 - name: readers\n    namespace: app\n    action: ALLOW\n    rules:\n\
         \x20     - from: { namespaces: [app] }\n        to: { methods: [GET], ports: [8080] }\n\
         \x20 - name: no-outsiders\n    namespace: app\n    action: DENY\n    rules:\n\
         \x20     - from: { not_namespaces: [app] }\n",
    )
    .unwrap();
    let insider = svid("app", "experimenter");
    let outsider = svid("external", "external-checker");
    assert_eq!(policy.rule_admits_source(0, 0, 8080, &insider), Some(true));
    assert_eq!(policy.rule_admits_source(0, 0, 9090, &insider), Some(false));
    assert_eq!(
        policy.rule_admits_source(0, 0, 8080, &outsider),
        Some(false)
    );
    assert_eq!(policy.rule_admits_source(1, 0, 8080, &outsider), Some(true));
    assert_eq!(policy.rule_admits_source(1, 0, 8080, &insider), Some(false));
    // A DENY fails closed: a peer without an identity matches its identity conditions.
    assert_eq!(
        policy.rule_admits_source(1, 0, 8080, &plaintext()),
        Some(true)
    );
    assert_eq!(
        policy.rule_admits_source(0, 0, 8080, &plaintext()),
        Some(false)
    );
    assert_eq!(policy.rule_admits_source(2, 0, 8080, &insider), None);
    assert_eq!(policy.rule_admits_source(0, 1, 8080, &insider), None);
}
