//! `memra bench ...`: measurements on the GPU.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};

use crate::args::Args;
use trunk::cpu::Variant;
use trunk::gpu::{Dsv4Gpu, GpuOptions};
use trunk::model::open_model;
use trunk::weights::ExpertArm;

const BENCH_HELP: &str = "memra bench park <model> [--capacity N] [--reps R] [--devices D]

park: fill a decode state of N positions (default 32768), time snapshots to
page-locked host memory and restores, against a plain pinned copy of the
same size (the link) measured in the same run.
";

pub fn bench(argv: &[String]) -> Result<()> {
    let a = Args::parse(argv, &["capacity", "reps", "devices", "out"], &[])?;
    if a.help || a.positional.is_empty() {
        print!("{BENCH_HELP}");
        return Ok(());
    }
    match a.positional[0].as_str() {
        "park" => {
            let model = open_model(&PathBuf::from(a.positional.get(1).context("missing <model>")?), ExpertArm::Native)?;
            let gpu = Dsv4Gpu::load(
                model.weights.clone(),
                &crate::gate::parse_devices(a.get("devices"))?,
                GpuOptions { variant: Variant::Exact, ..Default::default() },
            )?;
            let r = bench::park::measure(&gpu, a.parsed_or("capacity", 32768)?, a.parsed_or("reps", 7)?)?;
            if let Some(o) = a.path("out") {
                std::fs::write(&o, serde_json::to_vec_pretty(&r)?)?;
            }
            println!(
                "park bench {}: capacity {} positions, {} classes, {:.1} MB: snapshot (D2H) {:.1} GB/s, restore (H2D) {:.1} GB/s; link D2H {:.1} GB/s, H2D {:.1} GB/s ({:.0}% / {:.0}%)",
                model.label,
                r.capacity,
                r.classes,
                r.bytes as f64 / 1e6,
                r.snapshot_gbps,
                r.restore_gbps,
                r.link_d2h_gbps,
                r.link_h2d_gbps,
                100.0 * r.snapshot_gbps / r.link_d2h_gbps,
                100.0 * r.restore_gbps / r.link_h2d_gbps
            );
        }
        other => bail!("unknown bench `{other}`\n\n{BENCH_HELP}"),
    }
    Ok(())
}
