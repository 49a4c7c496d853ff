//! Time the in-memory generation of a preset (how long `memra bench
//! roofline` spends before it can measure).
//!
//!     cargo run --release -p trunk --example synth_speed -- flash-shape 1

use std::time::Instant;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let preset = trunk::synth::Preset::parse(
        args.get(1).map_or("tiny", |s| s.as_str()),
        args.get(2).and_then(|s| s.parse().ok()),
    )?;
    let s = trunk::synth::Synth::new(preset, 0);
    let t = Instant::now();
    let src = trunk::synth::in_memory(&s)?;
    let gen = t.elapsed().as_secs_f64();
    let w = trunk::weights::Dsv4Weights::load(&src, &s.config, trunk::weights::ExpertArm::Native)?;
    println!(
        "{}: generated in {gen:.1} s, {:.2} GB, {} threads",
        s.name,
        w.stored_bytes() as f64 / 1e9,
        rayon::current_num_threads()
    );
    Ok(())
}
