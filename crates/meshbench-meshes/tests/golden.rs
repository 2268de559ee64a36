//! Golden tests of every resource meshbench renders for the meshes a cluster runs (Istio,
//! Istio ambient, Linkerd, Cilium, Consul): E3's application and policy, and a policy that
//! uses what each mesh finds hard (L7 rules behind a DENY, a default other than Istio's, a
//! mode ambient lacks). A change in what meshbench would apply shows as a diff of
//! `tests/golden/*.yaml`; regenerate with `MESHBENCH_UPDATE_GOLDEN=1` and review the diff.

use std::path::PathBuf;

use meshbench_meshes::{translate_unplaced, Scenario};
use meshbench_policy::Policy;
use meshbench_topology::e3;

const INSTALLED: [&str; 5] = [
    "istio",
    "istio-ambient",
    "linkerd",
    "cilium",
    "consul-connect",
];

/// A policy with L7 rules after a DENY, a mesh-wide mode, a DISABLE and a non-Istio default.
const HARD_POLICY: &str = include_str!("golden/hard-policy.input.yaml");

fn golden(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(format!("{name}.yaml"))
}

fn rendered(mesh: &str, policy: &str) -> String {
    let mesh = Scenario::parse(mesh).unwrap();
    let installed = mesh
        .cluster()
        .and_then(|c| c.installed())
        .unwrap_or_else(|| panic!("{} runs as the cluster installed it", mesh.name()));
    let topology = e3::topology(
        &[
            e3::CALCULATOR,
            e3::EXPERIMENTER,
            e3::CHECKER,
            e3::EXTERNAL_CHECKER,
        ],
        meshbench_meshes::Ports::APP,
    );
    let policy = Policy::from_yaml(policy).unwrap();
    translate_unplaced(installed, &policy, &topology)
        .unwrap()
        .to_yaml()
}

#[test]
fn every_installed_meshs_resources_match_their_golden_files() {
    let update = std::env::var_os("MESHBENCH_UPDATE_GOLDEN").is_some();
    let mut stale = vec![];
    for mesh in INSTALLED {
        for (case, policy) in [
            ("e3", e3::zero_trust_policy("cluster.local")),
            ("l7", HARD_POLICY.to_owned()),
        ] {
            let name = format!("{mesh}-{case}");
            let got = rendered(mesh, &policy);
            let path = golden(&name);
            if update {
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, &got).unwrap();
                continue;
            }
            let want = std::fs::read_to_string(&path).unwrap_or_default();
            if got != want {
                stale.push(format!("{name}:\n{got}"));
            }
        }
    }
    assert!(
        stale.is_empty(),
        "rendered resources differ from tests/golden (review, then regenerate with \
         MESHBENCH_UPDATE_GOLDEN=1):\n{}",
        stale.join("\n")
    );
}

#[test]
fn every_mesh_a_cluster_runs_is_in_the_golden_set() {
    let installed: Vec<&str> = Scenario::all()
        .filter(|m| m.cluster().and_then(|c| c.installed()).is_some())
        .map(|m| m.name())
        .collect();
    assert_eq!(installed.len(), INSTALLED.len(), "{installed:?}");
    for name in INSTALLED {
        assert!(installed.contains(&name), "{name} in {installed:?}");
    }
}
