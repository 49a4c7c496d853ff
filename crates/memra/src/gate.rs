//! `memra gate ...`: the gates, as commands that exit non-zero on failure.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::args::Args;
use gates::band::{drift_coeff, tensor_steps, Realization};
use gates::chunks::check_chunks;
use gates::gpu::{compare, GpuRealization};
use gates::tf::tf_gate;
use trunk::bank::Bank;
use trunk::cpu::{CpuOracle, Variant};
use trunk::generate::{random_prompt, read_tokens_file};
use trunk::gpu::{Dsv4Gpu, Fault, GpuOptions, MoeArm, ProductSums};
use trunk::model::{open_model, LoadedModel};
use trunk::weights::ExpertArm;

const GATE_HELP: &str = "memra gate tf <model> <bank.json> <out-dir> [--devices 0,1] [--experts native|bf16]
                [--moe fused|per-expert] [--sums exact|tensor] [--prefill-chunk N] [--inject-fault drop-shared:L|shift-rope:L|stale-step]
memra gate chunks <model> [--tokens FILE | --prompt-len N] [--widths 1,7,32,64] [--devices D]
                [--variant exact|fp8] [--experts A] [--out FILE]
memra gate compare <model> [--tokens FILE | --prompt-len N] [--devices D] [--variant V] [--experts A]
memra gate host-cache <model> <tokens.json> [--devices D] [--variant V] [--backend gpu|cpu] [--out-dir DIR]
                [--drafter LIB.so [--drafter-options JSON|@FILE]]
memra gate drafters <model> --drafter LIB.so [--reference JSON] [--candidate JSON] [--steps N]
                [--tokens FILE | --prompt-len N] [--backend gpu|cpu] [--devices D] [--variant V] [--out FILE]

tf: the teacher-forced gate. Feeds the banked tokens to the GPU, compares the
argmax at every position with the bank, classifies disagreements (in band,
out of band, unresolved), runs twice for determinism, writes tf_gate.json and
the GPU rows of disagreements (gpu_rows.json). The variant is the bank's.
chunks: batch invariance (chunk widths, decode, monolithic, MoE arms).
compare: GPU against the CPU oracle, per layer and on the logits.
host-cache: warm a state (66 ids + 17 greedy steps), snapshot it to page-locked
host memory, restore into capacity +97, park to disk and load, compare every
class bit for bit, continue 11 steps on all and compare logits, and check that
chunk widths 1 and 64 leave identical classes. Prints the snapshot bytes.
With --drafter the drafter plugin rides along (every token's taps committed)
and its state classes (`drafter/...`) are parked and compared with the
trunk's (`trunk/...`).
drafters: two instances of one drafter plugin with different options (default
reference {\"realization\":\"cpu\"}, candidate {\"realization\":\"gpu\"}: DSpark's
GPU realization against its CPU reference) get the same taps along the
target's greedy trajectory (default 32 steps after a 64-token prompt); every
proposal's ids must be equal and the confidences within 1e-6.
Every gate exits non-zero when it fails.
";

pub fn parse_devices(s: Option<&str>) -> Result<Vec<usize>> {
    s.unwrap_or("0")
        .split(',')
        .map(|d| d.trim().parse::<usize>().with_context(|| format!("--devices: `{d}` is not a device ordinal")))
        .collect()
}

/// `--tokens FILE`, or a seeded random prompt of `--prompt-len` ids
/// (`default_len` without it).
fn tokens_arg(a: &Args, vocab: usize, default_len: usize) -> Result<Vec<u32>> {
    match (a.path("tokens"), a.parsed::<usize>("prompt-len")?) {
        (Some(_), Some(_)) => bail!("give --tokens or --prompt-len, not both"),
        (Some(f), None) => match read_tokens_file(&f, vocab)? {
            t if t.is_empty() => bail!("{}: no tokens", f.display()),
            t => Ok(t),
        },
        (None, Some(0)) => bail!("--prompt-len must be positive"),
        (None, n) => Ok(random_prompt(n.unwrap_or(default_len), a.parsed_or("seed", 0)?, 2, vocab as u32)),
    }
}

/// Where a command runs the model (`--backend`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Backend {
    Cpu,
    Gpu,
}

/// `--backend` (`default` without it). A GPU backend on a machine that has
/// none fails here, naming why, so that commands ask before they spend
/// minutes loading or generating weights.
pub(crate) fn backend(a: &Args, default: Backend) -> Result<Backend> {
    let b = match a.get("backend") {
        None => default,
        Some("cpu") => Backend::Cpu,
        Some("gpu") => Backend::Gpu,
        Some(other) => bail!("unknown --backend `{other}` (cpu or gpu)"),
    };
    if b == Backend::Gpu {
        trunk::gpu::require_available()?;
    }
    Ok(b)
}

/// The GPU engine with the options the commands share (`--moe`, `--devices`,
/// and `--inject-fault` where a command accepts it).
pub(crate) fn load_gpu(a: &Args, model: &LoadedModel, variant: Variant) -> Result<Dsv4Gpu> {
    let opts = GpuOptions {
        variant,
        moe: a.parsed_or("moe", MoeArm::Fused)?,
        fault: a.parsed::<Fault>("inject-fault")?,
        sums: a.parsed_or("sums", ProductSums::Exact)?,
    };
    upload(model.weights.clone(), &parse_devices(a.get("devices"))?, opts)
}

/// `Dsv4Gpu::load`, saying on stderr how long it took: the first start of
/// a build can spend a minute compiling kernels before the command's own
/// work begins.
pub(crate) fn upload(
    weights: std::sync::Arc<trunk::weights::Dsv4Weights>,
    devices: &[usize],
    opts: GpuOptions,
) -> Result<Dsv4Gpu> {
    let t = std::time::Instant::now();
    let gpu = Dsv4Gpu::load(weights, devices, opts)?;
    eprintln!("uploaded to devices {:?} in {:.1} s", gpu.devices(), t.elapsed().as_secs_f64());
    Ok(gpu)
}

/// `C_gpu + C_cpu` for `gpu` (its expert sums) on `model`.
fn c_sum(gpu: &Dsv4Gpu, model: &LoadedModel, variant: Variant) -> f64 {
    let c = model.config();
    let r = match gpu.tensor_widths() {
        w if w.is_empty() => Realization::Gpu,
        w => Realization::GpuTensor { squared_steps: tensor_steps(&w) },
    };
    drift_coeff(r, variant, c.num_hidden_layers) + drift_coeff(Realization::Cpu, variant, c.num_hidden_layers)
}

fn write_json(path: &Path, v: &impl serde::Serialize) -> Result<()> {
    std::fs::write(path, serde_json::to_vec_pretty(v)?).with_context(|| format!("writing {}", path.display()))
}

pub fn gate(argv: &[String]) -> Result<()> {
    let a = Args::parse(
        argv,
        &[
            "devices",
            "variant",
            "experts",
            "moe",
            "sums",
            "prefill-chunk",
            "inject-fault",
            "tokens",
            "prompt-len",
            "seed",
            "widths",
            "out",
            "backend",
            "out-dir",
            "drafter",
            "drafter-options",
            "reference",
            "candidate",
            "steps",
        ],
        &[],
    )?;
    if a.help || a.positional.is_empty() {
        print!("{GATE_HELP}");
        return Ok(());
    }
    let which = a.positional[0].as_str();
    let backend = match which {
        "tf" | "chunks" | "compare" => {
            trunk::gpu::require_available()?;
            Backend::Gpu
        }
        "host-cache" | "drafters" => backend(&a, Backend::Gpu)?,
        other => bail!("unknown gate `{other}` (tf, chunks, compare, host-cache or drafters)\n\n{GATE_HELP}"),
    };
    let model_path = PathBuf::from(a.positional.get(1).context("missing <model>")?);
    let arm: ExpertArm = a.parsed_or("experts", ExpertArm::Native)?;
    let model = open_model(&model_path, arm)?;
    match which {
        "tf" => {
            let bank_path = PathBuf::from(a.positional.get(2).context("missing <bank.json>")?);
            let out = PathBuf::from(a.positional.get(3).context("missing <out-dir>")?);
            let bank: Bank = serde_json::from_str(
                &std::fs::read_to_string(&bank_path).with_context(|| format!("reading {}", bank_path.display()))?,
            )
            .with_context(|| format!("{}: not a bank", bank_path.display()))?;
            if bank.source_sha256 != model.sha256 {
                bail!(
                    "{}: banked from weights {} but {} has weights {}",
                    bank_path.display(),
                    bank.source_sha256,
                    model.label,
                    model.sha256
                );
            }
            bank.check()
                .and_then(|_| bank.check_vocab(model.config().vocab_size))
                .with_context(|| bank_path.display().to_string())?;
            let variant: Variant = bank.variant.parse()?;
            if let Some(v) = a.parsed::<Variant>("variant")? {
                if v != variant {
                    bail!("--variant {v} differs from the bank's variant {variant}");
                }
            }
            let gpu = load_gpu(&a, &model, variant)?;
            let r = GpuRealization { gpu: &gpu, prefill_chunk: a.parsed_or("prefill-chunk", 64)? };
            let rep = tf_gate(&r, &bank, c_sum(&gpu, &model, variant))?;
            std::fs::create_dir_all(&out)?;
            write_json(&out.join("tf_gate.json"), &rep)?;
            write_json(&out.join("gpu_rows.json"), &rep.disagreements)?;
            println!(
                "tf gate [{}] {}: {} positions, agree {}, in band {}, out of band {}, unresolved {}, determinism {}, max top-1 drift {:.2e} -> {}",
                rep.realization,
                model.label,
                rep.positions,
                rep.agree,
                rep.in_band,
                rep.out_of_band,
                rep.unresolved,
                rep.determinism,
                rep.max_rel_drift_top1,
                if rep.pass { "PASS" } else { "FAIL" }
            );
            if !rep.pass {
                bail!("teacher-forced gate failed (details in {})", out.join("tf_gate.json").display());
            }
        }
        "chunks" => {
            let variant: Variant = a.parsed_or("variant", Variant::Exact)?;
            let mut gpu = load_gpu(&a, &model, variant)?;
            let tokens = tokens_arg(&a, model.config().vocab_size, 160)?;
            let widths: Vec<usize> = a
                .get("widths")
                .unwrap_or("1,7,32,64")
                .split(',')
                .map(|w| w.parse().context("--widths"))
                .collect::<Result<_>>()?;
            let c = c_sum(&gpu, &model, variant);
            let rep = check_chunks(&mut gpu, &tokens, &widths, c)?;
            if let Some(o) = a.path("out") {
                write_json(&o, &rep)?;
            }
            println!(
                "chunk gate [{variant} devices {:?} sums {:?}] {}: {} tokens, widths {:?} + decode bit-identical {}, monolithic identical {} (max rel {:.2e}, {} disagreements, {} out of band), MoE arms identical {}, greedy steps identical {} -> {}",
                gpu.devices(),
                gpu.opts.sums,
                model.label,
                rep.tokens,
                widths,
                rep.chunk_bit_identical,
                rep.monolithic_bit_identical,
                rep.monolithic_max_rel_diff,
                rep.monolithic_disagreements,
                rep.monolithic_out_of_band,
                rep.moe_arms_bit_identical,
                rep.greedy_steps_identical,
                if rep.pass { "PASS" } else { "FAIL" }
            );
            if !rep.pass {
                bail!("chunk gate failed");
            }
        }
        "compare" => {
            let variant: Variant = a.parsed_or("variant", Variant::Exact)?;
            let gpu = load_gpu(&a, &model, variant)?;
            let tokens = tokens_arg(&a, model.config().vocab_size, 160)?;
            let cpu = CpuOracle::new(model.weights.clone(), variant);
            let rep = compare(&cpu, &gpu, &tokens)?;
            if let Some(o) = a.path("out") {
                write_json(&o, &rep)?;
            }
            let layers: Vec<String> = rep.layers.iter().map(|l| format!("{}:{:.1e}", l.layer, l.max_rel)).collect();
            println!(
                "compare [{variant} experts {:?} devices {:?}] {}: {} positions, residual max rel by layer [{}], logits max rel {:.3e}, argmax agreement {:.4}",
                arm,
                gpu.devices(),
                model.label,
                rep.positions,
                layers.join(" "),
                rep.logits_max_rel,
                rep.argmax_agreement
            );
        }
        "host-cache" => {
            use gates::host_cache::{dsv4_identity, host_cache_gate, CpuEngine, DraftedEngine, GpuEngine};
            let variant: Variant = a.parsed_or("variant", Variant::Exact)?;
            let tokens = PathBuf::from(a.positional.get(2).context("missing <tokens.json>")?);
            let ids = read_tokens_file(&tokens, model.config().vocab_size)?;
            let dir = a.path("out-dir").unwrap_or_else(std::env::temp_dir);
            std::fs::create_dir_all(&dir)?;
            let identity = dsv4_identity(model.config(), &model.sha256, variant);
            let drafter = match a.path("drafter") {
                None => None,
                Some(lib) => Some((trunk::drafter::DrafterPlugin::load(&lib)?, crate::commands::drafter_options(&a)?)),
            };
            fn drafted<'t, T: trunk::speculative::Target>(
                target: &'t T,
                label: String,
                model_dir: &Path,
                (plugin, options_json): (std::sync::Arc<trunk::drafter::DrafterPlugin>, Option<String>),
                identity: kvstate::Identity,
                device: Option<usize>,
            ) -> DraftedEngine<'t, T> {
                DraftedEngine {
                    target,
                    plugin,
                    model_dir: model_dir.to_path_buf(),
                    options_json,
                    device,
                    identity,
                    label,
                }
            }
            let rep = match (backend, drafter.is_some()) {
                (Backend::Gpu, false) => {
                    let gpu = load_gpu(&a, &model, variant)?;
                    host_cache_gate(&GpuEngine { gpu: &gpu, identity }, &ids, &dir, None)?
                }
                (Backend::Cpu, false) => {
                    let o = CpuOracle::new(model.weights.clone(), variant);
                    host_cache_gate(&CpuEngine { oracle: &o, identity }, &ids, &dir, None)?
                }
                (Backend::Gpu, true) => {
                    let gpu = load_gpu(&a, &model, variant)?;
                    let label = format!("gpu/{variant} devices {:?}", gpu.devices());
                    let device = gpu.devices().last().copied();
                    let e = drafted(&gpu, label, &model_path, drafter.expect("a drafter"), identity, device);
                    host_cache_gate(&e, &ids, &dir, None)?
                }
                (Backend::Cpu, true) => {
                    let o = CpuOracle::new(model.weights.clone(), variant);
                    let e =
                        drafted(&o, format!("cpu/{variant}"), &model_path, drafter.expect("a drafter"), identity, None);
                    host_cache_gate(&e, &ids, &dir, None)?
                }
            };
            write_json(&dir.join("host_cache_gate.json"), &rep)?;
            println!(
                "host-cache gate [{}] {}: snapshot {} bytes ({:.1} MB/s out, restore {:.1} MB/s), park file {} bytes; restored identical {}, parked identical {}, 11-step logits identical {}, final classes identical {}, widths 1/64 identical {} -> {}",
                rep.engine,
                model.label,
                rep.snapshot_bytes,
                rep.snapshot_bytes as f64 / rep.snapshot_seconds.max(1e-9) / 1e6,
                rep.snapshot_bytes as f64 / rep.restore_seconds.max(1e-9) / 1e6,
                rep.park_bytes,
                rep.restored_classes_identical,
                rep.parked_classes_identical,
                rep.continuation_logits_identical,
                rep.final_classes_identical,
                rep.chunk_widths_identical,
                if rep.pass { "PASS" } else { "FAIL" }
            );
            if !rep.pass {
                bail!("host-cache gate failed: differing classes {:?}", rep.differing_classes);
            }
        }
        "drafters" => {
            use gates::drafters::{compare_drafters, CONF_TOLERANCE};
            let variant: Variant = a.parsed_or("variant", Variant::Exact)?;
            let plugin = trunk::drafter::DrafterPlugin::load(&a.path("drafter").context("missing --drafter LIB")?)?;
            let reference = a.get("reference").unwrap_or(r#"{"realization":"cpu"}"#).to_string();
            let candidate = a.get("candidate").unwrap_or(r#"{"realization":"gpu"}"#).to_string();
            let prompt = tokens_arg(&a, model.config().vocab_size, 64)?;
            let steps: usize = a.parsed_or("steps", 32)?;
            let gpu = match backend {
                Backend::Gpu => Some(load_gpu(&a, &model, variant)?),
                Backend::Cpu => None,
            };
            let setup = trunk::drafter::DrafterSetup {
                vocab_size: model.config().vocab_size,
                hidden_size: model.config().hidden_size,
                max_positions: prompt.len() + steps + 64,
                model_dir: Some(&model_path),
                options_json: None,
                embed_f32: None,
                head_f32: None,
                device: gpu.as_ref().and_then(|g| g.devices().last().copied()),
            };
            let rep = match &gpu {
                Some(g) => compare_drafters(g, plugin, &setup, &reference, &candidate, &prompt, steps, CONF_TOLERANCE)?,
                None => {
                    let o = CpuOracle::new(model.weights.clone(), variant);
                    compare_drafters(&o, plugin, &setup, &reference, &candidate, &prompt, steps, CONF_TOLERANCE)?
                }
            };
            if let Some(o) = a.path("out") {
                write_json(&o, &rep)?;
            }
            println!(
                "drafter gate {}: {} vs {}: {} proposals, ids equal {}/{}{}, max |conf diff| {:.3e} (tolerance {:.0e}), reference drafts confirmed by the target {:.3} per proposal -> {}",
                model.label,
                rep.reference_options,
                rep.candidate_options,
                rep.proposals,
                rep.ids_equal,
                rep.slots,
                rep.first_difference.map_or(String::new(), |(p, k, x, y)| format!(" (first difference: proposal {p} slot {k}: {x} vs {y})")),
                rep.max_conf_abs_diff,
                rep.conf_tolerance,
                rep.reference_mean_confirmed,
                if rep.pass { "PASS" } else { "FAIL" }
            );
            if !rep.pass {
                bail!("drafter gate failed");
            }
        }
        _ => unreachable!("the gate's name is checked before the model loads"),
    }
    Ok(())
}
