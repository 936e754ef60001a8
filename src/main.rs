//! The `clef` binary: parses the command line and hands over to the library.

use mimalloc::MiMalloc;

#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

fn main() {
    // Transparent huge pages turn each thread's first touch of an allocator arena into
    // 2 MiB of resident memory: ~7 MB for nothing on an idle edge box.
    let _ = nix::sys::prctl::set_thp_disable(true);
    std::process::exit(clef::cli::run(std::env::args_os()));
}
