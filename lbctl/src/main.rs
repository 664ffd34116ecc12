//! `lbctl`: parse the arguments (clap exits 2 on a usage error), run one subcommand on a
//! single-threaded runtime, print any error as one line on stderr and exit 0, 1 or 2.

use std::process::ExitCode;

use clap::Parser;
use lbctl::cli::Cli;
use lbctl::error::CtlError;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("lbctl: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(lbctl::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        // `lbctl actions -f | head`: the reader left, which is not an error.
        Err(CtlError::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lbctl: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
