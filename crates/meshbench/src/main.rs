fn main() -> std::process::ExitCode {
    meshbench::cli::main()
}
