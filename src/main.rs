//! The `rung` command: a thin shell over the core library.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
