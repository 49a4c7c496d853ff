//! A byte-level `tokenizer.json` for synthetic models: `<bos>` = 0,
//! `<eos>` = 1, then one token per byte (ids 2..258), in the GPT-2
//! byte-to-unicode alphabet that the `ByteLevel` pre-tokenizer and decoder
//! use. No merges, so any text round-trips through its bytes.

use std::path::Path;

use anyhow::Result;
use serde_json::{json, Map, Value};

use crate::config::Dsv4Config;

pub const BOS: &str = "<｜begin▁of▁sentence｜>";
pub const EOS: &str = "<｜end▁of▁sentence｜>";
/// Id of the token for byte 0.
pub const FIRST_BYTE_ID: u32 = 2;

/// GPT-2's reversible map from bytes to printable characters.
pub fn byte_to_char(b: u8) -> char {
    let printable = |c: u32| (33..=126).contains(&c) || (161..=172).contains(&c) || (174..=255).contains(&c);
    if printable(b as u32) {
        return b as char;
    }
    // non-printable bytes map to 256.. in byte order
    let mut n = 0u32;
    for x in 0..b as u32 {
        if !printable(x) {
            n += 1;
        }
    }
    char::from_u32(256 + n).unwrap()
}

pub fn tokenizer_json(cfg: &Dsv4Config) -> Value {
    let mut vocab = Map::new();
    vocab.insert(BOS.into(), json!(0));
    vocab.insert(EOS.into(), json!(1));
    for b in 0..=255u8 {
        vocab.insert(byte_to_char(b).to_string(), json!(FIRST_BYTE_ID + b as u32));
    }
    let special = |id: u32, content: &str| {
        json!({"id": id, "content": content, "single_word": false, "lstrip": false, "rstrip": false,
               "normalized": false, "special": true})
    };
    let _ = cfg;
    json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [special(0, BOS), special(1, EOS)],
        "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                  "ignore_merges": false, "vocab": vocab, "merges": []}
    })
}

pub fn write_tokenizer(path: &Path, cfg: &Dsv4Config) -> Result<()> {
    std::fs::write(path, serde_json::to_vec_pretty(&tokenizer_json(cfg))?)?;
    Ok(())
}
