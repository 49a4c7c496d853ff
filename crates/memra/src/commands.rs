//! The subcommands: argument handling and output formatting only.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use crate::args::Args;
use trunk::bank::Bank;
use trunk::cpu::{CpuOracle, Logits, Variant};
use trunk::generate::{greedy_cpu, greedy_gpu, random_prompt, read_tokens_file};
use trunk::model::{open_or_embedded, LoadedModel};
use trunk::synth::check::activation_report;
use trunk::synth::write::{write_model, WriteOptions};
use trunk::synth::{Preset, Synth};
use trunk::weights::{CheckpointLayout, ExpertArm};

fn bar(len: u64, what: &str, bytes: bool) -> ProgressBar {
    let pb = ProgressBar::new(len);
    let tmpl = if bytes {
        "{msg} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}"
    } else {
        "{msg} [{bar:40}] {pos}/{len} {per_sec} eta {eta}"
    };
    pb.set_style(ProgressStyle::with_template(tmpl).unwrap().progress_chars("=> "));
    pb.set_message(what.to_string());
    pb
}

use crate::gate::{backend, load_gpu, Backend};

/// The positions `parts` add up to, if the model has that many
/// (`max_position_embeddings`); else an error naming the parts.
fn within_positions(model: &LoadedModel, parts: &[(&str, usize)]) -> Result<usize> {
    let max = model.config().max_position_embeddings;
    let total = parts.iter().try_fold(0usize, |t, &(_, n)| t.checked_add(n));
    match total {
        Some(t) if t as u64 <= max => Ok(t),
        _ => {
            let named: Vec<String> = parts.iter().map(|(w, n)| format!("{w} ({n})")).collect();
            bail!("{} exceed the model's {max} positions (`max_position_embeddings`)", named.join(" + "))
        }
    }
}

fn load(a: &Args) -> Result<(LoadedModel, CpuOracle)> {
    let arm: ExpertArm = a.parsed_or("experts", ExpertArm::Native)?;
    let variant: Variant = a.parsed_or("variant", Variant::Exact)?;
    let model = open_or_embedded(a.path("model").as_deref(), arm)?;
    let oracle = CpuOracle::new(model.weights.clone(), variant);
    Ok((model, oracle))
}

const GENERATE_HELP: &str = "memra generate [--model DIR|FILE.gguf] [--prompt TEXT | --tokens FILE] [--max-tokens N]
                [--json] [--variant exact|fp8] [--experts native|bf16] [--backend cpu|gpu] [--devices 0,1]
                [--moe fused|per-expert] [--sums exact|tensor] [--drafter LIB.so [--drafter-options JSON|@FILE|@baseline]
                 [--ceiling N] [--schedule confidence|fixed] [--baseline]]

Greedy decoding. Without --model it runs the embedded tiny synthetic model
(generated in memory, seed 0), so it works on a fresh machine. Prints the
text (stdout) and tokens/s (stderr); --json prints one object with
`prompt` (ids), `tokens`, `text`, `tokens_per_s`; that output can feed the
replay drafter (--drafter-options @FILE).

With --drafter, decoding is speculative and greedy: the drafter plugin
(loaded at run time) proposes up to --ceiling tokens (default 5), the target
verifies them in one batched pass and keeps the longest agreeing prefix plus
its own next token, so the output equals plain greedy decoding. The verify
length per step comes from the confidence scheduler (the DSpark paper's
Algorithm 1, with the target's steps per second profiled at start) or is
fixed. --drafter-options @FILE reads the options from a file; a bank file
becomes {\"trajectory\": prompt + tokens} for the replay drafter. Reports
mean accepted length and per-position acceptance (--json: `mean_accepted`,
`acceptance_by_position`). --baseline first decodes plainly on the same
engine and reports both rates and whether the tokens are equal
(`baseline_tokens_per_s`, `equal_to_baseline`); --drafter-options @baseline
then gives the replay drafter that run's trajectory (full acceptance: the
verification pipeline's upper bound) without a second model load.
";

pub fn generate(argv: &[String]) -> Result<()> {
    let a = Args::parse(
        argv,
        &[
            "model",
            "prompt",
            "tokens",
            "max-tokens",
            "variant",
            "experts",
            "backend",
            "devices",
            "moe",
            "sums",
            "drafter",
            "drafter-options",
            "ceiling",
            "schedule",
        ],
        &["json", "no-stop", "baseline"],
    )?;
    if a.help {
        print!("{GENERATE_HELP}");
        return Ok(());
    }
    let on = backend(&a, Backend::Cpu)?;
    let (model, oracle) = load(&a)?;
    if let Some(p) = &model.tokenizer.missing {
        eprintln!(
            "warning: no {}: the synthetic models' byte-level tokenizer stands in, so the prompt's ids and the text \
             printed mean nothing to a real model (put the checkpoint's tokenizer.json there, or pass --tokens FILE)",
            p.display()
        );
    }
    let prompt: Vec<u32> = match (a.get("prompt"), a.path("tokens")) {
        (Some(_), Some(_)) => bail!("give --prompt or --tokens, not both"),
        (_, Some(f)) => read_tokens_file(&f, model.config().vocab_size)?,
        (p, None) => model.tokenizer.encode(p.unwrap_or("The quick brown fox"))?,
    };
    let max_new: usize = a.parsed_or("max-tokens", 32)?;
    within_positions(&model, &[("the prompt", prompt.len()), ("--max-tokens", max_new)])?;
    let stop = if a.flag("no-stop") { None } else { model.config().eos_token_id };
    if let Some(path) = a.path("drafter") {
        return generate_speculative(&a, on, &model, &oracle, &prompt, max_new, stop, &path);
    }
    if a.flag("baseline") {
        bail!("--baseline compares a --drafter run with plain decoding: give --drafter");
    }
    let (g, backend) = if on == Backend::Gpu {
        let gpu = load_gpu(&a, &model, oracle.variant)?;
        (greedy_gpu(&gpu, &prompt, max_new, stop)?, format!("gpu {:?}", gpu.devices()))
    } else {
        (greedy_cpu(&oracle, &prompt, max_new, stop)?, "cpu".to_string())
    };
    let text = model.tokenizer.decode(&g.tokens)?;
    if a.flag("json") {
        let out = json!({
            "model": model.label,
            "variant": oracle.variant.to_string(),
            "backend": backend,
            "prompt_tokens": g.prompt_tokens,
            "prompt": prompt,
            "tokens": g.tokens,
            "text": text,
            "tokens_per_s": g.tokens_per_s(),
            "prefill_seconds": g.prefill_seconds,
            "decode_seconds": g.decode_seconds,
        });
        println!("{out}");
    } else {
        println!("{text}");
        eprintln!(
            "{} [{backend}]: {} prompt tokens, {} new tokens in {:.3} s ({:.1} tokens/s, prefill {:.3} s)",
            model.label,
            g.prompt_tokens,
            g.tokens.len(),
            g.prefill_seconds + g.decode_seconds,
            g.tokens_per_s(),
            g.prefill_seconds
        );
    }
    Ok(())
}

pub(crate) fn drafter_options(a: &Args) -> Result<Option<String>> {
    let Some(o) = a.get("drafter-options") else { return Ok(None) };
    let Some(file) = o.strip_prefix('@') else { return Ok(Some(o.to_string())) };
    let text = std::fs::read_to_string(file).with_context(|| format!("reading {file}"))?;
    let v: serde_json::Value = serde_json::from_str(&text).with_context(|| format!("{file}: not JSON"))?;
    if let (Some(p), Some(t)) = (v.get("prompt").and_then(|x| x.as_array()), v.get("tokens").and_then(|x| x.as_array()))
    {
        let traj: Vec<serde_json::Value> = p.iter().chain(t).cloned().collect();
        return Ok(Some(json!({ "trajectory": traj }).to_string()));
    }
    Ok(Some(text))
}

#[allow(clippy::too_many_arguments)]
fn generate_speculative(
    a: &Args,
    on: Backend,
    model: &LoadedModel,
    oracle: &CpuOracle,
    prompt: &[u32],
    max_new: usize,
    stop: Option<u32>,
    path: &Path,
) -> Result<()> {
    use trunk::drafter::{Drafter, DrafterPlugin, DrafterSetup};
    use trunk::speculative::{profile_sps, speculative_greedy, Schedule, SpecOptions, Target};
    let plugin = DrafterPlugin::load(path)?;
    let gpu = if on == Backend::Gpu { Some(load_gpu(a, model, oracle.variant)?) } else { None };
    let baseline = if a.flag("baseline") {
        Some(match &gpu {
            Some(g) => greedy_gpu(g, prompt, max_new, stop)?,
            None => greedy_cpu(oracle, prompt, max_new, stop)?,
        })
    } else {
        None
    };
    let opts = match (a.get("drafter-options"), &baseline) {
        (Some("@baseline"), Some(b)) => {
            let trajectory = [prompt, &b.tokens[..]].concat();
            Some(json!({ "trajectory": trajectory }).to_string())
        }
        (Some("@baseline"), None) => bail!("--drafter-options @baseline needs --baseline"),
        _ => drafter_options(a)?,
    };
    let ceiling: usize = a.parsed_or("ceiling", 5)?;
    let max_positions = within_positions(
        model,
        &[
            ("the prompt", prompt.len()),
            ("--max-tokens", max_new),
            ("--ceiling", ceiling),
            ("a verify pass's 2 more", 2),
        ],
    )?;
    let cfg = model.config();
    // the checkpoint directory (a .gguf's folder); a synth: address as it is
    let model_dir: Option<PathBuf> = a.path("model").map(|p| {
        if p.is_dir() || p.to_string_lossy().starts_with("synth:") {
            p
        } else {
            p.parent().map(|x| x.to_path_buf()).unwrap_or(p)
        }
    });
    let setup = DrafterSetup {
        vocab_size: cfg.vocab_size,
        hidden_size: cfg.hidden_size,
        max_positions,
        model_dir: model_dir.as_deref(),
        options_json: opts.as_deref(),
        // no drafter here reads them (DSpark loads its own from the checkpoint);
        // decoding both to f32 would cost 2 x vocab x hidden x 4 bytes at start
        embed_f32: None,
        head_f32: None,
        device: gpu.as_ref().and_then(|g| g.devices().last().copied()),
    };
    let mut drafter = Drafter::new(plugin, &setup)?;
    fn run<T: Target>(
        t: &T,
        d: &mut Drafter,
        prompt: &[u32],
        a: &Args,
        max_new: usize,
        stop: Option<u32>,
        ceiling: usize,
    ) -> Result<(Vec<u32>, trunk::speculative::SpecStats)> {
        let schedule = match a.get("schedule").unwrap_or("confidence") {
            "fixed" => Schedule::Fixed,
            "confidence" => Schedule::Confidence { sps: profile_sps(t, ceiling + 1, 3)? },
            other => bail!("unknown --schedule `{other}` (confidence or fixed)"),
        };
        let o = SpecOptions { max_new, stop, ceiling, schedule, prefill_chunk: 64 };
        speculative_greedy(t, d, prompt, &o)
    }
    let (tokens, stats, backend) = if let Some(gpu) = &gpu {
        let (t, s) = run(gpu, &mut drafter, prompt, a, max_new, stop, ceiling)?;
        (t, s, format!("gpu {:?}", gpu.devices()))
    } else {
        let mut o = CpuOracle::new(model.weights.clone(), oracle.variant);
        o.moe = a.parsed_or("moe", trunk::cpu::ops::moe::MoeArm::PerExpert)?;
        let (t, s) = run(&o, &mut drafter, prompt, a, max_new, stop, ceiling)?;
        (t, s, "cpu".to_string())
    };
    let text = model.tokenizer.decode(&tokens)?;
    let tps = tokens.len() as f64 / stats.seconds.max(1e-9);
    if a.flag("json") {
        println!(
            "{}",
            json!({
                "model": model.label,
                "variant": oracle.variant.to_string(),
                "backend": backend,
                "drafter": drafter.name(),
                "prompt_tokens": prompt.len(),
                "prompt": prompt,
                "tokens": tokens,
                "text": text,
                "tokens_per_s": tps,
                "steps": stats.steps,
                "mean_accepted": stats.mean_accepted(),
                "acceptance_by_position": stats.acceptance_by_position(),
                "baseline_tokens_per_s": baseline.as_ref().map(|b| b.tokens_per_s()),
                "equal_to_baseline": baseline.as_ref().map(|b| b.tokens == tokens),
            })
        );
    } else {
        println!("{text}");
        let by: Vec<String> = stats.acceptance_by_position().iter().map(|x| format!("{x:.2}")).collect();
        eprintln!(
            "{} [{backend}, drafter {}]: {} new tokens in {} steps, {:.3} s ({:.1} tokens/s), mean accepted {:.2}, acceptance by position [{}]",
            model.label,
            drafter.name(),
            tokens.len(),
            stats.steps,
            stats.seconds,
            tps,
            stats.mean_accepted(),
            by.join(", ")
        );
        if let Some(b) = &baseline {
            eprintln!(
                "baseline (plain greedy, same engine): {:.1} tokens/s; speculative tokens equal: {}; speedup {:.2}x",
                b.tokens_per_s(),
                b.tokens == tokens,
                tps / b.tokens_per_s().max(1e-9)
            );
        }
    }
    Ok(())
}

const SYNTH_HELP: &str = "memra synth --preset tiny|small|flash-shape --seed S --out DIR
             [--layout official|hf] [--gguf] [--layers N] [--shard-mb MB] [--dspark] [--check]

Writes a deterministic synthetic DSV4 checkpoint: config.json, safetensors
(sharded above --shard-mb, default 2000, with model.safetensors.index.json),
tokenizer.json. --layout official (default) uses the published checkpoint's
names, dtypes and legacy config keys (FP8 + 128x128 UE8M0 scales, FP4
experts + 1x32 E8M0 scales); --layout hf uses transformers' parameter names
(BF16/F32, stacked experts). --gguf also writes DIR/model.gguf in llama.cpp's
deepseek4 layout. --layers sets flash-shape's depth (default 4). --check runs
a 64-token prompt through the CPU oracle and reports activation ranges.
--dspark adds a DSpark drafter (mtp.* stages, official layout only) that
`memra generate --drafter <libdspark>` can load.
";

pub fn synth(argv: &[String]) -> Result<()> {
    let a =
        Args::parse(argv, &["preset", "seed", "out", "layout", "layers", "shard-mb"], &["gguf", "check", "dspark"])?;
    if a.help {
        print!("{SYNTH_HELP}");
        return Ok(());
    }
    let preset = Preset::parse(a.require("preset")?, a.parsed("layers")?)?;
    let seed: u64 = a.parsed_or("seed", 0)?;
    let out = PathBuf::from(a.require("out")?);
    let layout = match a.get("layout").unwrap_or("official") {
        "official" => CheckpointLayout::Official,
        "hf" => CheckpointLayout::Hf,
        other => bail!("unknown --layout `{other}` (official or hf)"),
    };
    let shard_mb: usize = a.parsed_or("shard-mb", 2000)?;
    let mut s = Synth::new(preset, seed);
    if a.flag("dspark") {
        if layout != CheckpointLayout::Official {
            bail!("--dspark needs --layout official (the drafter's mtp.* tensors use the published names)");
        }
        s = s.with_dspark();
    }
    let t = Instant::now();
    let write = |layout: CheckpointLayout, path: &Path, what: &str| -> Result<()> {
        let pb = bar(0, what, true);
        let opts = WriteOptions { layout, shard_bytes: shard_mb << 20 };
        write_model(&s, path, &opts, &mut |done, total| {
            pb.set_length(total as u64);
            pb.set_position(done as u64);
        })?;
        pb.finish_and_clear();
        Ok(())
    };
    write(layout, &out, &format!("{} {:?}", s.name, layout).to_lowercase())?;
    if a.flag("gguf") {
        write(CheckpointLayout::Gguf, &out.join("model.gguf"), &format!("{} gguf", s.name))?;
    }
    let bytes: u64 = std::fs::read_dir(&out)?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum();
    eprintln!(
        "wrote {} (preset {}, seed {seed}, {:?}{}) : {:.1} MB in {:.1} s",
        out.display(),
        s.name,
        layout,
        if a.flag("gguf") { " + gguf" } else { "" },
        bytes as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );
    if a.flag("check") {
        let model = trunk::model::open_model(&out, ExpertArm::Native)?;
        let oracle = CpuOracle::new(model.weights.clone(), Variant::Exact);
        let r = activation_report(&oracle, 64)?;
        eprint!("{}", r.render());
        let p = r.problems();
        if !p.is_empty() {
            bail!("activation check failed: {}", p.join("; "));
        }
        eprintln!("activation check: ok");
    }
    Ok(())
}

const BANK_HELP: &str = "memra bank [--model DIR] (--prompt-len N [--seed S] | --tokens FILE) --n N --out FILE
           [--variant exact|fp8] [--experts native|bf16]

Runs the CPU oracle greedily for N tokens after the prompt and writes the
banked trajectory JSON: variant, prompt, tokens, top8_ids, top8_logits
(flat n*8; top-1 is the banked token; non-increasing), source_sha256,
config_name. --prompt-len draws a seeded random prompt.
";

pub fn bank(argv: &[String]) -> Result<()> {
    let a = Args::parse(argv, &["model", "prompt-len", "seed", "tokens", "n", "out", "variant", "experts"], &[])?;
    if a.help {
        print!("{BANK_HELP}");
        return Ok(());
    }
    let (model, oracle) = load(&a)?;
    let cfg = model.config();
    let prompt = match (a.parsed::<usize>("prompt-len")?, a.path("tokens")) {
        (Some(_), Some(_)) => bail!("give --prompt-len or --tokens, not both"),
        (Some(n), None) => random_prompt(n, a.parsed_or("seed", 0)?, 2, cfg.vocab_size as u32),
        (None, Some(f)) => read_tokens_file(&f, cfg.vocab_size)?,
        (None, None) => bail!("give --prompt-len N or --tokens FILE"),
    };
    let n = match a.parsed::<usize>("n")?.context("missing --n")? {
        0 => bail!("--n must be positive"),
        n => n,
    };
    within_positions(&model, &[("the prompt", prompt.len()), ("--n", n)])?;
    let out = PathBuf::from(a.require("out")?);
    let pb = bar(n as u64, "banking", false);
    let t = Instant::now();
    let name = model_name(&model);
    let b = Bank::record(&oracle, &prompt, n, (&name, &model.label, &model.sha256), |k| pb.set_position(k as u64))?;
    pb.finish_and_clear();
    write_atomic(&out, &serde_json::to_vec(&b)?)?;
    eprintln!(
        "banked {} positions of {} ({}, {} prompt tokens) in {:.1} s -> {}",
        n,
        model.label,
        oracle.variant,
        prompt.len(),
        t.elapsed().as_secs_f64(),
        out.display()
    );
    Ok(())
}

const LOGITS_HELP: &str = "memra logits [--model DIR] --tokens FILE --out FILE [--variant exact|fp8]
             [--experts native|bf16] [--backend cpu|gpu] [--devices 0,1] [--sums exact|tensor]

Teacher-forced logits of every position: little-endian f32 [n, vocab] in
FILE, and FILE.json with shape, variant, backend and the weights' sha256.
";

pub fn logits(argv: &[String]) -> Result<()> {
    let a =
        Args::parse(argv, &["model", "tokens", "out", "variant", "experts", "backend", "devices", "moe", "sums"], &[])?;
    if a.help {
        print!("{LOGITS_HELP}");
        return Ok(());
    }
    let gpu = backend(&a, Backend::Cpu)? == Backend::Gpu;
    let (model, oracle) = load(&a)?;
    let tokens = read_tokens_file(&PathBuf::from(a.require("tokens")?), model.config().vocab_size)?;
    if tokens.is_empty() {
        bail!("the tokens file is empty");
    }
    let out = PathBuf::from(a.require("out")?);
    let t = Instant::now();
    let (l, backend) = if gpu {
        let g = load_gpu(&a, &model, oracle.variant)?;
        let mut st = g.alloc_decode_state_for(tokens.len())?;
        (g.prefill_with_cache(&mut st, &tokens, Logits::All)?, format!("gpu {:?}", g.devices()))
    } else {
        let mut state = oracle.new_state(tokens.len());
        (oracle.forward(&mut state, &tokens, Logits::All)?, "cpu".to_string())
    };
    let secs = t.elapsed().as_secs_f64();
    let mut bytes = Vec::with_capacity(l.len() * 4);
    for v in &l {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    write_atomic(&out, &bytes)?;
    let side = json!({
        "shape": [tokens.len(), model.config().vocab_size],
        "dtype": "f32",
        "variant": oracle.variant.to_string(),
        "experts": format!("{:?}", model.weights.expert_arm).to_lowercase(),
        "backend": backend,
        "model": model.label,
        "config_name": model_name(&model),
        "weights_sha256": model.sha256,
    });
    let side_path = PathBuf::from(format!("{}.json", out.display()));
    write_atomic(&side_path, &serde_json::to_vec_pretty(&side)?)?;
    eprintln!("{} positions in {:.2} s -> {} (+ {})", tokens.len(), secs, out.display(), side_path.display());
    Ok(())
}

fn model_name(m: &LoadedModel) -> String {
    let c = m.config();
    format!("dsv4-{}l-d{}-e{}-v{}", c.num_hidden_layers, c.hidden_size, c.n_routed_experts, c.vocab_size)
}

/// Write to a temporary file and rename it into place.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = PathBuf::from(format!("{}.tmp", path.display()));
    let mut f = std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(())
}

const KERNELS_HELP: &str = "memra kernels [--arch MAJOR.MINOR]

Compiles the GPU kernels with NVRTC to machine code for compute capability
--arch (default 9.0, the H100 and H200) and keeps it where the GPU forward
looks on every start ($XDG_CACHE_HOME/memra/kernels, else
~/.cache/memra/kernels), so that the first start of this build on the
machine skips the compile (about a minute). Needs NVRTC (libnvrtc.so.13),
not a GPU. Prints where the image is kept.
";

pub fn kernels(argv: &[String]) -> Result<()> {
    let a = Args::parse(argv, &["arch"], &[])?;
    if a.help {
        print!("{KERNELS_HELP}");
        return Ok(());
    }
    let arch = a.get("arch").unwrap_or("9.0");
    let (major, minor) = arch
        .split_once('.')
        .and_then(|(m, n)| Some((m.parse::<i32>().ok()?, n.parse::<i32>().ok()?)))
        .with_context(|| format!("--arch {arch}: expected a compute capability MAJOR.MINOR, like 9.0"))?;
    let path = trunk::gpu::nvrtc::kept_cubin_path(major, minor)?;
    // the kept file's time: a file that is missing, or damaged and written
    // again, means a compile
    let written = || path.as_ref().and_then(|p| p.metadata().ok()?.modified().ok());
    let before = written();
    if before.is_none() {
        eprintln!("compiling the kernels for sm_{major}{minor} with NVRTC (about a minute)");
    }
    let t = Instant::now();
    let image = trunk::gpu::nvrtc::cubin(major, minor)?;
    let after = written();
    let how = if after.is_some() && after == before {
        "already kept".to_string()
    } else {
        format!("compiled in {:.1} s", t.elapsed().as_secs_f64())
    };
    let mb = image.len() as f64 / 1e6;
    match (after, &path) {
        (Some(_), Some(p)) => println!("sm_{major}{minor} kernels ({mb:.1} MB) {how}: {}", p.display()),
        _ => bail!(
            "sm_{major}{minor} kernels ({mb:.1} MB) {how}, but not kept: no writable cache directory (set XDG_CACHE_HOME or HOME)"
        ),
    }
    Ok(())
}
