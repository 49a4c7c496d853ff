//! memra: one command line over the engine. Each subcommand parses its
//! options and calls into the library crates; no model logic lives here.

mod args;
mod bench;
mod commands;
mod gate;

use anyhow::Result;

const USAGE: &str = "memra — a DeepSeek V4 inference engine

usage: memra <command> [options]        (memra <command> --help for each)

commands:
  generate   greedy generation (embedded tiny model when no --model)
  synth      write a deterministic synthetic DSV4 checkpoint
  bank       bank a greedy CPU-oracle trajectory with its top-8 logits
  logits     teacher-forced logits of every position of a token sequence
  gate       the gates: tf (teacher-forced), chunks (batch invariance), compare, host-cache
  bench      measurements on the GPU: park (snapshot/restore throughput)
  kernels    compile the GPU kernels ahead of a first start (no GPU needed)
";

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let code = match run(&argv) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e:#}");
            1
        }
    };
    std::process::exit(code);
}

fn run(argv: &[String]) -> Result<()> {
    let Some(cmd) = argv.first() else {
        print!("{USAGE}");
        return Ok(());
    };
    let rest = &argv[1..];
    match cmd.as_str() {
        "generate" => commands::generate(rest),
        "synth" => commands::synth(rest),
        "bank" => commands::bank(rest),
        "logits" => commands::logits(rest),
        "gate" => gate::gate(rest),
        "bench" => bench::bench(rest),
        "kernels" => commands::kernels(rest),
        "--help" | "-h" | "help" => {
            print!("{USAGE}");
            Ok(())
        }
        other => anyhow::bail!("unknown command `{other}`\n\n{USAGE}"),
    }
}
