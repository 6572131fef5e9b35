//! `switchyard-engine gguf-slice IN.gguf OUT.gguf --layers N`: the same model
//! cut to its first N blocks (embeddings, final norm and head kept). Its
//! first N layers compute exactly what the full model's do, so executor
//! parity and per-layer speed can be checked with a file small enough to
//! carry where the whole model does not fit (a GPU host reached through a
//! 64 MiB transfer, for one).

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

use anyhow::{bail, Context, Result};
use candle_core::quantized::gguf_file::{self, Value};
use candle_core::Device;

pub fn slice_gguf(input: &Path, output: &Path, layers: usize) -> Result<()> {
    let mut file = File::open(input).with_context(|| format!("opening {}", input.display()))?;
    let content = gguf_file::Content::read(&mut file).with_context(|| format!("reading GGUF {}", input.display()))?;
    let arch = match content.metadata.get("general.architecture") {
        Some(v) => v.to_string()?.clone(),
        None => bail!("GGUF metadata general.architecture missing"),
    };
    let count_key = format!("{arch}.block_count");
    let total = content.metadata.get(&count_key).with_context(|| format!("GGUF metadata {count_key} missing"))?.to_u32()? as usize;
    if layers == 0 || layers > total {
        bail!("--layers must be within 1..={total}");
    }
    let block = |name: &str| -> Option<usize> { name.strip_prefix("blk.")?.split('.').next()?.parse().ok() };
    let mut names: Vec<&String> = content.tensor_infos.keys().filter(|n| block(n).is_none_or(|b| b < layers)).collect();
    names.sort();
    let mut tensors = Vec::with_capacity(names.len());
    for name in &names {
        tensors.push(content.tensor(&mut file, name, &Device::Cpu).with_context(|| format!("tensor {name}"))?);
    }
    let new_count = Value::U32(layers as u32);
    let mut keys: Vec<&String> = content.metadata.keys().collect();
    keys.sort();
    let metadata: Vec<(&str, &Value)> =
        keys.iter().map(|k| (k.as_str(), if **k == count_key { &new_count } else { &content.metadata[*k] })).collect();
    let tensor_refs: Vec<(&str, &candle_core::quantized::QTensor)> = names.iter().map(|n| n.as_str()).zip(tensors.iter()).collect();
    let mut out = BufWriter::new(File::create(output).with_context(|| format!("creating {}", output.display()))?);
    gguf_file::write(&mut out, &metadata, &tensor_refs)?;
    Ok(())
}

pub fn run(args: &[String]) -> Result<()> {
    let (mut input, mut output, mut layers) = (None, None, None);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--layers" => layers = Some(it.next().context("--layers needs a value")?.parse::<usize>()?),
            _ if input.is_none() => input = Some(a.clone()),
            _ if output.is_none() => output = Some(a.clone()),
            other => bail!("unexpected argument {other:?}"),
        }
    }
    let (Some(input), Some(output), Some(layers)) = (input, output, layers) else {
        bail!("usage: switchyard-engine gguf-slice IN.gguf OUT.gguf --layers N");
    };
    slice_gguf(Path::new(&input), Path::new(&output), layers)?;
    let bytes = std::fs::metadata(&output)?.len();
    println!("{output}: first {layers} blocks, {:.1} MB", bytes as f64 / 1e6);
    Ok(())
}
