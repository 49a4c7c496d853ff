//! Criterion benches: fused vs per-expert MoE, and chunked prefill widths
//! (1, 7, 32, 64), on the CPU oracle everywhere and on the GPU where one is
//! present (`trunk::gpu::unavailable_reason()` is None).
//!
//!     cargo bench -p bench

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use trunk::cpu::ops::moe::MoeArm;
use trunk::cpu::{CpuOracle, Logits, Variant};
use trunk::synth::{in_memory, Preset, Synth};
use trunk::weights::{Dsv4Weights, ExpertArm};

fn tiny() -> Arc<Dsv4Weights> {
    let s = Synth::new(Preset::Tiny, 0);
    Arc::new(Dsv4Weights::load(&in_memory(&s).unwrap(), &s.config, ExpertArm::Native).unwrap())
}

fn tokens(n: usize) -> Vec<u32> {
    (0..n).map(|i| (i * 7919 % 300) as u32 + 2).collect()
}

fn moe_arms(c: &mut Criterion) {
    let w = tiny();
    let toks = tokens(64);
    let mut g = c.benchmark_group("moe_arm_prefill64_tiny_cpu");
    g.sample_size(10);
    for arm in [MoeArm::Fused, MoeArm::PerExpert] {
        let mut o = CpuOracle::new(w.clone(), Variant::Exact);
        o.moe = arm;
        g.bench_function(BenchmarkId::from_parameter(format!("{arm:?}")), |b| {
            b.iter(|| {
                let mut st = o.new_state(64);
                o.forward(&mut st, &toks, Logits::Last).unwrap()
            })
        });
    }
    g.finish();
    if trunk::gpu::unavailable_reason().is_none() {
        let mut g = c.benchmark_group("moe_arm_prefill64_tiny_gpu");
        for arm in [MoeArm::Fused, MoeArm::PerExpert] {
            let opts = trunk::gpu::GpuOptions { moe: arm, ..Default::default() };
            let gpu = trunk::gpu::Dsv4Gpu::load(w.clone(), &[0], opts).unwrap();
            g.bench_function(BenchmarkId::from_parameter(format!("{arm:?}")), |b| {
                b.iter(|| {
                    let mut st = gpu.alloc_decode_state_for_transient(64, 64).unwrap();
                    gpu.prefill_with_cache(&mut st, &toks, Logits::Last).unwrap()
                })
            });
        }
        g.finish();
    }
}

fn chunk_widths(c: &mut Criterion) {
    let w = tiny();
    let toks = tokens(64);
    let o = CpuOracle::new(w.clone(), Variant::Exact);
    let mut g = c.benchmark_group("prefill64_chunk_width_tiny_cpu");
    g.sample_size(10);
    for width in [1usize, 7, 32, 64] {
        g.bench_function(BenchmarkId::from_parameter(width), |b| {
            b.iter(|| {
                let mut st = o.new_state(64);
                for ch in toks.chunks(width) {
                    o.forward(&mut st, ch, Logits::None).unwrap();
                }
            })
        });
    }
    g.finish();
    if trunk::gpu::unavailable_reason().is_none() {
        let gpu = trunk::gpu::Dsv4Gpu::load(w.clone(), &[0], Default::default()).unwrap();
        let mut g = c.benchmark_group("prefill64_chunk_width_tiny_gpu");
        for width in [1usize, 7, 32, 64] {
            g.bench_function(BenchmarkId::from_parameter(width), |b| {
                b.iter(|| {
                    let mut st = gpu.alloc_decode_state_for_transient(64, width).unwrap();
                    gpu.prefill_with_cache_chunked(&mut st, &toks, width, Logits::None).unwrap()
                })
            });
        }
        g.finish();
    }
}

criterion_group!(benches, moe_arms, chunk_widths);
criterion_main!(benches);
