//! `meshbench profiles`: what the built-in experiments are, and their specs as a starting
//! point for one's own (`meshbench run --spec FILE`).

use clap::Subcommand;
use meshbench_experiment::{builtin_spec, profile_names, Profile, Scale};

#[derive(Debug, Subcommand)]
pub enum ProfilesCommand {
    /// Each profile with its size here and at the study's scale.
    List,
    /// Print a profile's spec (YAML).
    Show {
        /// The profile's name.
        name: String,
    },
}

pub fn run(command: ProfilesCommand) -> anyhow::Result<()> {
    match command {
        ProfilesCommand::List => {
            for name in profile_names() {
                let local = Profile::builtin(name, Scale::Local)?;
                let original = Profile::builtin(name, Scale::Original).ok();
                let size = |p: &Profile| {
                    format!(
                        "{} cells, about {}",
                        p.cells(),
                        humantime::format_duration(std::time::Duration::from_secs(
                            p.estimated_duration().as_secs()
                        ))
                    )
                };
                println!("{name}\n  {}", local.description);
                println!("  local: {}", size(&local));
                if let Some(original) = &original {
                    println!("  original (--scale original): {}", size(original));
                }
            }
        }
        ProfilesCommand::Show { name } => print!("{}", builtin_spec(&name)?),
    }
    Ok(())
}
