//! `memra bench ...`: measurements on the GPU.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};

use crate::args::Args;
use trunk::cpu::Variant;
use trunk::gpu::{Dsv4Gpu, GpuOptions, ProductSums};
use trunk::model::open_model;
use trunk::weights::ExpertArm;

const BENCH_HELP: &str = "memra bench park <model> [--capacity N] [--reps R] [--devices D]
memra bench roofline [--model DIR|synth:ADDR | --layers N] [--seed S] [--contexts 1024,8192,32768]
                     [--steps N] [--prefill N] [--prefill-reps R] [--variant exact|fp8] [--devices D]
                     [--sums exact|tensor] [--out FILE]

park: fill a decode state of N positions (default 32768), time snapshots to
page-locked host memory and restores, against a plain pinned copy of the
same size (the link) measured in the same run.
roofline: the flash-shape preset (DSV4-Flash widths, FP8 and FP4 weights,
generated in memory, default 4 layers) or a model (a directory or a synth:
address such as synth:flash-shape,layers=43,shared-quantized): ceilings (a
2 GiB device copy on each device, a cuBLAS bf16 8192^3 GEMM), batch-1
decode at each context (median of --steps, device events), prefill of
--prefill tokens (median of --prefill-reps, default 2); bytes and FLOPs per
step, fractions of the ceilings (with a layer split: the stages' bytes at
their own devices' copy rates), memory per device, per-op breakdown (the
`boundary` line is the activations' device-to-device crossing).
--sums tensor puts the routed experts' products on the BF16 tensor
cores (inside the band of the CPU oracle, not bit for bit; docs/perf.md).
";

pub fn bench(argv: &[String]) -> Result<()> {
    let a = Args::parse(
        argv,
        &[
            "capacity",
            "reps",
            "devices",
            "out",
            "model",
            "layers",
            "seed",
            "contexts",
            "steps",
            "prefill",
            "prefill-reps",
            "variant",
            "sums",
        ],
        &[],
    )?;
    if a.help || a.positional.is_empty() {
        print!("{BENCH_HELP}");
        return Ok(());
    }
    match a.positional[0].as_str() {
        "park" => {
            let (capacity, reps) = (a.positive("capacity", 32768)?, a.positive("reps", 7)?);
            trunk::gpu::require_available()?;
            let model = open_model(&PathBuf::from(a.positional.get(1).context("missing <model>")?), ExpertArm::Native)?;
            let gpu = Dsv4Gpu::load(
                model.weights.clone(),
                &crate::gate::parse_devices(a.get("devices"))?,
                GpuOptions { variant: Variant::Exact, ..Default::default() },
            )?;
            let r = bench::park::measure(&gpu, capacity, reps)?;
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
        "roofline" => roofline(&a)?,
        other => bail!("unknown bench `{other}`\n\n{BENCH_HELP}"),
    }
    Ok(())
}

fn roofline(a: &Args) -> Result<()> {
    use bench::roofline::{ceilings, decode_case, prefill_case};
    use std::time::Instant;
    use trunk::synth::{in_memory, Preset, Synth};
    // every option is read, and the GPU asked for, before the weights are
    // generated or loaded: minutes at the flash shape
    let devices = crate::gate::parse_devices(a.get("devices"))?;
    let variant: Variant = a.parsed_or("variant", Variant::Exact)?;
    let sums: ProductSums = a.parsed_or("sums", ProductSums::Exact)?;
    let contexts: Vec<usize> = a
        .get("contexts")
        .unwrap_or("1024,8192,32768")
        .split(',')
        .map(|x| x.parse().with_context(|| format!("--contexts: `{x}` is not a number of positions")))
        .collect::<Result<_>>()?;
    let steps = a.positive("steps", 30)?;
    let n: usize = a.parsed_or("prefill", 4096)?;
    let prefill_reps = a.positive("prefill-reps", 2)?;
    let (layers, seed) = (a.positive("layers", 4)?, a.parsed_or("seed", 0)?);
    trunk::gpu::require_available()?;
    let t = Instant::now();
    let (weights, label) = match a.path("model") {
        Some(p) => {
            let m = open_model(&p, ExpertArm::Native)?;
            (m.weights.clone(), m.label.clone())
        }
        None => {
            let s = Synth::new(Preset::FlashShape { layers }, seed);
            eprintln!("{}: generating the weights in memory (seed {seed}) ...", s.name);
            let src = in_memory(&s)?;
            let w = trunk::weights::Dsv4Weights::load(&src, &s.config, ExpertArm::Native)?;
            (std::sync::Arc::new(w), s.name.clone())
        }
    };
    eprintln!(
        "{label}: weights ready in {:.1} s ({:.2} GB)",
        t.elapsed().as_secs_f64(),
        weights.stored_bytes() as f64 / 1e9
    );
    let gpu = crate::gate::upload(weights, &devices, GpuOptions { variant, sums, ..Default::default() })?;
    let vram = gpu.vram_report()?;
    for v in &vram {
        println!(
            "vram: device {} ({}) layers {:?}: weights {:.2} GiB, used {:.2} GiB of {:.2} GiB",
            v.device,
            v.name,
            v.layers,
            v.weights as f64 / (1u64 << 30) as f64,
            (v.total - v.free) as f64 / (1u64 << 30) as f64,
            v.total as f64 / (1u64 << 30) as f64
        );
    }
    if !gpu.boundary_direct.is_empty() {
        println!("stage boundaries: direct peer copy {:?}", gpu.boundary_direct);
    }
    if !gpu.boundary_direct.is_empty() {
        let decode = bench::roofline::boundary_cost(&gpu, 1)?;
        let prefill = bench::roofline::boundary_cost(&gpu, 4096)?;
        println!(
            "boundary crossing (peer copy of the residual streams) per boundary: one token {:?} ms, 4096 tokens {:?} ms",
            decode.iter().map(|m| (m * 1e4).round() / 1e4).collect::<Vec<_>>(),
            prefill.iter().map(|m| (m * 1e4).round() / 1e4).collect::<Vec<_>>()
        );
    }
    let ceil = ceilings(&gpu)?;
    println!(
        "ceilings: copy {:.0} GB/s (read+write; by stage {:?}), bf16 GEMM {:.0} TFLOP/s",
        ceil.copy_gbps,
        ceil.copy_gbps_by_stage.iter().map(|g| g.round()).collect::<Vec<_>>(),
        ceil.bf16_tflops
    );
    let mut cases = Vec::new();
    for ctx in contexts {
        cases.push(decode_case(&gpu, &ceil, ctx, steps)?);
    }
    if n > 0 {
        cases.push(prefill_case(&gpu, &ceil, n, prefill_reps)?);
    }
    println!(
        "{:<22} {:>9} {:>8} {:>8} {:>9} {:>8} {:>7} {:>8} {:>7}",
        "case", "ms", "p10", "p90", "GB", "GB/s", "copy%", "TFLOP/s", "mat%"
    );
    for c in &cases {
        println!(
            "{:<22} {:>9.3} {:>8.3} {:>8.3} {:>9.3} {:>8.0} {:>6.1}% {:>8.2} {:>6.2}%",
            c.name,
            c.median_ms,
            c.p10_ms,
            c.p90_ms,
            c.bytes / 1e9,
            c.gbps,
            100.0 * c.fraction_of_copy,
            c.tflops,
            100.0 * c.fraction_of_matrix
        );
    }
    for c in &cases {
        let top: Vec<String> = c.breakdown_ms.iter().take(12).map(|(l, ms)| format!("{l} {ms:.3}")).collect();
        println!("breakdown {} (ms): {}", c.name, top.join(", "));
    }
    if let Some(o) = a.path("out") {
        let vram: Vec<_> = vram
            .iter()
            .map(|v| serde_json::json!({ "device": v.device, "name": v.name, "layers": [v.layers.start, v.layers.end], "weights_bytes": v.weights, "used_bytes": v.total - v.free, "total_bytes": v.total }))
            .collect();
        let doc = serde_json::json!({ "model": label, "variant": variant.to_string(), "devices": gpu.devices(), "boundary_direct": gpu.boundary_direct, "vram": vram, "ceilings": ceil, "cases": cases });
        std::fs::write(&o, serde_json::to_vec_pretty(&doc)?)?;
    }
    Ok(())
}
