//! The command line (SPEC §2): argument parsing and one module per command.

/// `println!` for a command's output on stdout: see [`write_stdout`].
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::cli::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` for a command's output on stdout: see [`write_stdout`].
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::write_stdout(format_args!($($arg)*))
    };
}

mod bench;
mod check;
mod decide;
mod diff;
mod flash;
mod replay;
mod serve;
pub mod test;
mod tune;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use std::fmt::Write as _;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

/// Writes a command's output to stdout. A reader that has gone (`clef decide … | head`) ends the
/// process quietly with success, as it ends other Unix tools, rather than with a panic and a
/// backtrace; any other failure to write is an error message and exit status 1.
pub(crate) fn write_stdout(args: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_fmt(args).and_then(|()| stdout.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("clef: cannot write the output: {e}");
        std::process::exit(1);
    }
}

/// clef: decisions in microseconds, explained.
#[derive(Debug, Parser)]
#[command(
    name = "clef",
    version,
    about = "A decision appliance: decision tables evaluated in microseconds, explained."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the appliance (the default command).
    Serve {
        /// the config file (default: ./config.yaml, then /etc/clef/config.yaml)
        #[arg(short = 'c', long = "config")]
        config: Option<PathBuf>,
        /// the port of the decision listener (overrides server.port)
        #[arg(long)]
        port: Option<u16>,
        /// the address of the decision listener (overrides server.host)
        #[arg(long)]
        host: Option<String>,
    },
    /// Evaluate one input locally and print the decision JSON.
    Decide {
        /// the table file
        table: PathBuf,
        /// the input JSON file; `-` or absent reads stdin
        input: Option<PathBuf>,
        /// add a trace of every rule tried
        #[arg(long)]
        explain: bool,
    },
    /// Validate tables; print every problem as path:line:col.
    Check {
        /// table files or folders of tables
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
    /// Run the tests stored with tables.
    Test {
        /// table files or folders of tables
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// list rules that no test reaches
        #[arg(long)]
        coverage: bool,
    },
    /// Time in-process decisions of one input: median and p99 per decision.
    Bench {
        /// the table file
        table: PathBuf,
        /// the input JSON file
        input: PathBuf,
        /// how many timed decisions
        #[arg(short = 'n', default_value_t = 100_000)]
        n: usize,
        /// print one JSON object
        #[arg(long)]
        json: bool,
        /// time decisions with a trace (what `?explain=true` costs)
        #[arg(long)]
        explain: bool,
    },
    /// Compile a flash table's source into a .cfb file, or print what a .cfb file holds.
    Flash {
        #[command(subcommand)]
        command: FlashCommand,
    },
    /// Replay recorded decision snapshots through a table and score it.
    Replay {
        /// snapshot files (plain or zstd NDJSON) or folders of them
        #[arg(required = true)]
        snapshots: Vec<PathBuf>,
        /// the table file to replay through; only snapshots of its name are replayed
        #[arg(long, value_name = "TABLE")]
        table: PathBuf,
        /// a second table file, scored side by side
        #[arg(long, value_name = "TABLE")]
        against: Option<PathBuf>,
        /// replay every snapshot, whatever table recorded it
        #[arg(long)]
        any_table: bool,
        /// print one JSON object
        #[arg(long)]
        json: bool,
        /// the latency budget per decision, in microseconds
        #[arg(long, value_name = "N", default_value_t = 50_000.0)]
        sla_us: f64,
        /// the CPU budget per decision, in microseconds (default: what the recorded decisions
        /// cost when served, the mean of their recorded latency)
        #[arg(long, value_name = "N")]
        cost_budget_us: Option<f64>,
        /// example inputs shown per changed rule
        #[arg(long, value_name = "N", default_value_t = 3)]
        examples: usize,
    },
    /// Show what changed between two versions of a table: rules, conditions, actions, params.
    Diff {
        /// the old version (any kind of table file)
        old: PathBuf,
        /// the new version (a file of the same kind)
        new: PathBuf,
        /// print one JSON object
        #[arg(long)]
        json: bool,
    },
    /// Work with tuning's promoted parameter values.
    Tune {
        #[command(subcommand)]
        command: TuneCommand,
    },
    /// Print a shell's completion script for clef (bash, zsh, fish, elvish, powershell).
    Completions {
        /// the shell
        shell: clap_complete::Shell,
    },
    /// Print clef's man page (roff), or write a page per command into a folder.
    Man {
        /// write clef.1 and a page per command (clef-serve.1 …) into this folder
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Print the version.
    Version,
}

/// The groups of `clef --help`, as docs/cli.md groups the commands.
const GROUPS: &[(&str, &[&str])] = &[
    ("Serve", &["serve"]),
    ("Tables", &["decide", "check", "test", "bench", "flash", "diff"]),
    ("Recorded decisions and tuning", &["replay", "tune"]),
    ("Shell", &["completions", "man", "version", "help"]),
];

/// clef's command line as clap describes it, with `clef --help` listing the commands in the
/// groups of [`GROUPS`]: what the parser, the completions and the man page are made from.
pub fn command() -> clap::Command {
    let mut cmd = Cli::command();
    cmd.build();
    let width = cmd.get_subcommands().map(|s| s.get_name().len()).max().unwrap_or(0);
    let mut list = String::new();
    for (heading, names) in GROUPS {
        let _ = writeln!(list, "{heading}:");
        for sub in names.iter().filter_map(|n| cmd.find_subcommand(n)) {
            let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
            let _ = writeln!(list, "  {:<width$}  {about}", sub.get_name());
        }
        list.push('\n');
    }
    let template =
        format!("{{about-with-newline}}\n{{usage-heading}} {{usage}}\n\n{list}Options:\n{{options}}{{after-help}}");
    cmd.help_template(template)
}

#[derive(Debug, Subcommand)]
enum TuneCommand {
    /// Print the table file with the parameter values tuning promoted, to commit.
    Export {
        /// the table file
        table: PathBuf,
        /// the config file whose state_dir holds the promoted values (default: ./config.yaml,
        /// then /etc/clef/config.yaml)
        #[arg(short = 'c', long = "config")]
        config: Option<PathBuf>,
        /// the state folder itself, instead of the config's state_dir
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
enum FlashCommand {
    /// Compile a flash table's source (NAME.flash.json) into the binary NAME.cfb.
    Compile {
        /// the flash table's source
        source: PathBuf,
        /// where to write the .cfb (default: NAME.cfb beside the source)
        #[arg(short = 'o', long = "output")]
        output: Option<PathBuf>,
    },
    /// Print what a .cfb file holds: dimensions, buckets, the matrix, actions, checksum.
    Inspect {
        /// the .cfb file
        file: PathBuf,
    },
}

/// Runs the command line; returns the exit code.
pub fn run(args: impl IntoIterator<Item = OsString>) -> i32 {
    let parsed = command().try_get_matches_from(args).and_then(|m| Cli::from_arg_matches(&m));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    let command = cli.command.unwrap_or(Command::Serve { config: None, port: None, host: None });
    match command {
        Command::Serve { config, port, host } => serve::run(config.as_deref(), port, host),
        Command::Decide { table, input, explain } => decide::run(&table, input.as_deref(), explain),
        Command::Check { paths } => check::run(&paths),
        Command::Test { paths, coverage } => test::run(&paths, coverage),
        Command::Bench { table, input, n, json, explain } => bench::run(&table, &input, n, json, explain),
        Command::Flash { command: FlashCommand::Compile { source, output } } => {
            flash::compile(&source, output.as_deref())
        }
        Command::Flash { command: FlashCommand::Inspect { file } } => flash::inspect(&file),
        Command::Replay { snapshots, table, against, any_table, json, sla_us, cost_budget_us, examples } => {
            if let Some(budget) = cost_budget_us.filter(|b| b.is_nan() || *b <= 0.0) {
                eprintln!(
                    "error: --cost-budget-us must be a number of microseconds above 0, not {budget}; leave it out to \
                     judge by what the recorded decisions cost when served"
                );
                return 2;
            }
            // 0: what the recorded decisions cost
            let cost_budget_us = cost_budget_us.unwrap_or(0.0);
            let options = crate::replay::Options { table, against, any_table, sla_us, cost_budget_us, examples };
            replay::run(&snapshots, &options, json)
        }
        Command::Diff { old, new, json } => diff::run(&old, &new, json),
        Command::Tune { command: TuneCommand::Export { table, config, state_dir } } => {
            tune::export(&table, config.as_deref(), state_dir.as_deref())
        }
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "clef", &mut std::io::stdout());
            0
        }
        Command::Man { dir } => man(dir.as_deref()),
        Command::Version => {
            outln!("clef {}", env!("CARGO_PKG_VERSION"));
            0
        }
    }
}

/// `clef man`: clef(1) on stdout, or with a folder, a page per command written there.
fn man(dir: Option<&Path>) -> i32 {
    let written = match dir {
        None => clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout()),
        Some(dir) => std::fs::create_dir_all(dir).and_then(|()| clap_mangen::generate_to(Cli::command(), dir)),
    };
    match written {
        Ok(()) => 0,
        Err(e) => {
            eprintln!(
                "error: cannot write the man page{}: {e}",
                dir.map(|d| format!(" into {}", d.display())).unwrap_or_default()
            );
            1
        }
    }
}

/// Table files directly inside `dir` (not its subfolders), sorted.
pub(crate) fn tables_in(dir: &std::path::Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && crate::table::TableKind::of_path(p).is_some())
        .collect();
    out.sort();
    Ok(out)
}

/// A folder named on the command line that gives no table.
#[derive(Debug)]
pub(crate) enum FolderError {
    /// it holds no table file
    Empty(PathBuf),
    /// it cannot be listed
    Unreadable(PathBuf, std::io::Error),
}

impl std::fmt::Display for FolderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FolderError::Empty(p) => write!(f, "{}: no tables in this folder", p.display()),
            FolderError::Unreadable(p, e) => write!(f, "{}: cannot read the folder: {e}", p.display()),
        }
    }
}

/// Expands folders to the tables they hold.
pub(crate) fn expand(paths: &[PathBuf]) -> Vec<Result<PathBuf, FolderError>> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            match tables_in(p) {
                Ok(list) if list.is_empty() => out.push(Err(FolderError::Empty(p.clone()))),
                Ok(list) => out.extend(list.into_iter().map(Ok)),
                Err(e) => out.push(Err(FolderError::Unreadable(p.clone(), e))),
            }
        } else {
            out.push(Ok(p.clone()));
        }
    }
    out
}

/// The table files of `paths` (folders expanded), grouped as the server groups its tables
/// folder: by folder and table name. A named flash file brings the other half of its pair
/// (`NAME.flash.json` beside `NAME.cfb`) when it exists, as the server would find both. Groups
/// keep the order of `paths`; an entry that is not a table file (a tests file) is its own group.
pub(crate) fn table_groups(paths: &[PathBuf]) -> Vec<Result<Vec<PathBuf>, FolderError>> {
    use crate::table::{table_name, TableKind};
    let mut groups: Vec<Result<Vec<PathBuf>, FolderError>> = Vec::new();
    let key = |p: &Path| (p.parent().map(Path::to_path_buf), table_name(p));
    for entry in expand(paths) {
        let path = match entry {
            Ok(p) => p,
            Err(e) => {
                groups.push(Err(e));
                continue;
            }
        };
        let partner = match TableKind::of_path(&path) {
            None => {
                groups.push(Ok(vec![path]));
                continue;
            }
            Some(TableKind::Flash) => Some(path.with_file_name(format!("{}.cfb", table_name(&path)))),
            Some(TableKind::FlashCompiled) => Some(path.with_file_name(format!("{}.flash.json", table_name(&path)))),
            Some(_) => None,
        };
        let same = groups.iter().position(|g| {
            g.as_ref()
                .ok()
                .and_then(|g| g.first())
                .is_some_and(|first| TableKind::of_path(first).is_some() && key(first) == key(&path))
        });
        let at = same.unwrap_or_else(|| {
            groups.push(Ok(Vec::new()));
            groups.len() - 1
        });
        let Some(Ok(group)) = groups.get_mut(at) else { continue };
        for p in std::iter::once(path).chain(partner.filter(|p| p.is_file())) {
            if !group.contains(&p) {
                group.push(p);
            }
        }
        group.sort();
    }
    groups
}

/// What the server would make of each group of [`table_groups`]: the one file it serves, or
/// the error naming the files when they cannot make one table (`registry::pick`).
pub(crate) fn served_file(group: &[PathBuf]) -> Result<PathBuf, crate::registry::TableError> {
    match group {
        [one] => Ok(one.clone()),
        _ => {
            let name = group.first().map(|p| crate::table::table_name(p)).unwrap_or_default();
            crate::registry::pick(&name, group).map(|(path, _)| path)
        }
    }
}
