//! A lone network namespace with only its loopback up, for one program whose ports are fixed
//! (ztunnel binds 15001, 15006, 15008 and 15021 wherever it runs): the bench gives it a
//! namespace of its own so that nothing of the machine's is in the way and its traffic capture
//! touches nothing else. Named with the lab prefix, so `meshbench lab clean` finds one a killed
//! run left behind; deleted, with whatever still runs in it, on drop.

use crate::command::{run, run_in};
use crate::netns::{delete_netns, NetnsLab};
use crate::{new_lab_id, Error, LAB_PREFIX};

#[derive(Debug)]
pub struct ScratchNetns {
    name: String,
}

impl ScratchNetns {
    /// Creates `mb-<id>-<purpose>` with its loopback up; needs what a netns lab needs.
    pub fn create(purpose: &str) -> Result<Self, Error> {
        NetnsLab::check_permitted()?;
        let name = format!("{LAB_PREFIX}{}-{purpose}", new_lab_id());
        run("ip", &["netns", "add", &name])?;
        let scratch = ScratchNetns { name };
        run_in(&scratch.name, "ip", &["link", "set", "lo", "up"])?;
        Ok(scratch)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `program args...` inside the namespace (`ip netns exec`) and returns its stdout.
    pub fn run(&self, program: &str, args: &[&str]) -> Result<String, Error> {
        run_in(&self.name, program, args)
    }

    /// The program and arguments that start `program args` inside the namespace: `ip netns
    /// exec` enters it and execs, so the process keeps its PID.
    pub fn wrap(&self, program: &std::path::Path, args: &[String]) -> (String, Vec<String>) {
        let mut full = vec!["netns".to_owned(), "exec".to_owned(), self.name.clone()];
        full.push(program.display().to_string());
        full.extend(args.iter().cloned());
        ("ip".to_owned(), full)
    }
}

impl Drop for ScratchNetns {
    fn drop(&mut self) {
        if let Err(e) = delete_netns(&self.name) {
            tracing::warn!(netns = %self.name, error = %e, "cannot delete the namespace");
        }
    }
}
