//! The `meshbench` binary's command-line layer: argument parsing and the glue from each
//! command to the library crates that do the work. One binary, many roles: it runs
//! experiments and also acts as every lab component (workload server, load generator, CA).

pub mod cli;
