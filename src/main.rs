//! The `clef` binary: parses the command line and hands over to the library.

use mimalloc::MiMalloc;

#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

fn main() {
    std::process::exit(clef::cli::run(std::env::args_os()));
}
