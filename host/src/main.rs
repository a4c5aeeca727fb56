fn main() -> std::process::ExitCode {
    etcd_steward::cli::main()
}
