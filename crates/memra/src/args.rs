//! A small command-line parser: `--key value` options, `--flag` switches and
//! positional arguments, with an error for anything unknown.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::str::FromStr;

use anyhow::{bail, Context, Result};

pub struct Args {
    opts: HashMap<String, String>,
    flags: HashSet<String>,
    pub positional: Vec<String>,
    pub help: bool,
}

impl Args {
    /// Parse `argv` (after the subcommand). `values` take an argument, `flags` do not.
    pub fn parse(argv: &[String], values: &[&str], flags: &[&str]) -> Result<Args> {
        let mut a = Args { opts: HashMap::new(), flags: HashSet::new(), positional: Vec::new(), help: false };
        let mut i = 0;
        while i < argv.len() {
            let s = &argv[i];
            if s == "--help" || s == "-h" {
                a.help = true;
            } else if let Some(name) = s.strip_prefix("--") {
                let (name, inline) = match name.split_once('=') {
                    Some((n, v)) => (n, Some(v.to_string())),
                    None => (name, None),
                };
                if values.contains(&name) {
                    let v = match inline {
                        Some(v) => v,
                        None => {
                            i += 1;
                            argv.get(i).cloned().with_context(|| format!("option --{name} needs a value"))?
                        }
                    };
                    if a.opts.insert(name.to_string(), v).is_some() {
                        bail!("option --{name} given twice");
                    }
                } else if flags.contains(&name) {
                    a.flags.insert(name.to_string());
                } else {
                    bail!("unknown option --{name} (see --help)");
                }
            } else {
                a.positional.push(s.clone());
            }
            i += 1;
        }
        Ok(a)
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.opts.get(name).map(|s| s.as_str())
    }

    pub fn path(&self, name: &str) -> Option<PathBuf> {
        self.get(name).map(PathBuf::from)
    }

    pub fn flag(&self, name: &str) -> bool {
        self.flags.contains(name)
    }

    pub fn parsed<T: FromStr>(&self, name: &str) -> Result<Option<T>>
    where
        T::Err: std::fmt::Display,
    {
        match self.get(name) {
            None => Ok(None),
            Some(v) => v.parse::<T>().map(Some).map_err(|e| anyhow::anyhow!("--{name} {v}: {e}")),
        }
    }

    pub fn parsed_or<T: FromStr>(&self, name: &str, default: T) -> Result<T>
    where
        T::Err: std::fmt::Display,
    {
        Ok(self.parsed(name)?.unwrap_or(default))
    }

    /// A count that must be at least one (`default` without the option).
    pub fn positive(&self, name: &str, default: usize) -> Result<usize> {
        match self.parsed_or(name, default)? {
            0 => anyhow::bail!("--{name} must be positive"),
            n => Ok(n),
        }
    }

    pub fn require(&self, name: &str) -> Result<&str> {
        self.get(name).with_context(|| format!("missing required option --{name} (see --help)"))
    }
}
