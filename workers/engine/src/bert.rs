//! BERT sentence embeddings (all-MiniLM-L6-v2 and kin): candle-transformers'
//! BertModel, the model's own tokenizer.json, then mean pooling over the
//! attention mask and L2 normalisation, as sentence-transformers does.

use std::path::Path;

use anyhow::{anyhow, Context, Result};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

pub struct BertEmbedder {
    model: BertModel,
    tokenizer: Tokenizer,
    device: Device,
    pub hidden: usize,
    pub n_layers: usize,
    pub vocab: usize,
    pub max_seq_len: usize,
    pub weight_bytes: u64,
}

/// Inputs per forward: bounds the padded batch tensor's size.
const MAX_BATCH: usize = 32;

impl BertEmbedder {
    pub fn load(dir: &Path, device: &Device) -> Result<Self> {
        let config_path = dir.join("config.json");
        let config: Config = serde_json::from_str(
            &std::fs::read_to_string(&config_path).with_context(|| format!("reading {}", config_path.display()))?,
        )
        .with_context(|| format!("parsing {}", config_path.display()))?;
        // sentence-transformers truncates at max_seq_length, not at the
        // tokenizer.json default, and pads to the longest input in a batch.
        let st_max = std::fs::read_to_string(dir.join("sentence_bert_config.json"))
            .ok()
            .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
            .and_then(|v| v.get("max_seq_length").and_then(|m| m.as_u64()))
            .map(|m| m as usize);
        let max_seq_len = st_max.unwrap_or(config.max_position_embeddings).min(config.max_position_embeddings);
        let tok_path = dir.join("tokenizer.json");
        let mut tokenizer =
            Tokenizer::from_file(&tok_path).map_err(|e| anyhow!("loading {}: {e}", tok_path.display()))?;
        tokenizer
            .with_truncation(Some(TruncationParams { max_length: max_seq_len, ..Default::default() }))
            .map_err(|e| anyhow!("{e}"))?;
        let pad_id = config.pad_token_id as u32;
        let pad_token = tokenizer.id_to_token(pad_id).unwrap_or_else(|| "[PAD]".to_string());
        tokenizer.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            pad_id,
            pad_token,
            ..Default::default()
        }));
        let weights = dir.join("model.safetensors");
        let weight_bytes = std::fs::metadata(&weights).map(|m| m.len()).unwrap_or(0);
        // SAFETY: the file is mapped read-only and not modified while loaded.
        let vb = unsafe { VarBuilder::from_mmaped_safetensors(&[&weights], DType::F32, device) }
            .with_context(|| format!("mapping {}", weights.display()))?;
        let model = BertModel::load(vb, &config).context("building BertModel")?;
        Ok(BertEmbedder {
            model,
            tokenizer,
            device: device.clone(),
            hidden: config.hidden_size,
            n_layers: config.num_hidden_layers,
            vocab: config.vocab_size,
            max_seq_len,
            weight_bytes,
        })
    }

    /// One unit vector per input, in order, and the number of tokens used.
    pub fn embed(&self, inputs: &[String]) -> Result<(Vec<Vec<f32>>, usize)> {
        let mut out = Vec::with_capacity(inputs.len());
        let mut tokens = 0usize;
        for chunk in inputs.chunks(MAX_BATCH) {
            let encodings = self.tokenizer.encode_batch(chunk.to_vec(), true).map_err(|e| anyhow!("tokenizing: {e}"))?;
            let len = encodings.iter().map(|e| e.get_ids().len()).max().unwrap_or(0);
            let mut ids = Vec::with_capacity(chunk.len() * len);
            let mut mask = Vec::with_capacity(chunk.len() * len);
            let mut types = Vec::with_capacity(chunk.len() * len);
            for e in &encodings {
                ids.extend(e.get_ids().iter().copied());
                mask.extend(e.get_attention_mask().iter().copied());
                types.extend(e.get_type_ids().iter().copied());
                tokens += e.get_attention_mask().iter().filter(|&&m| m == 1).count();
            }
            let b = chunk.len();
            let ids = Tensor::from_vec(ids, (b, len), &self.device)?;
            let types = Tensor::from_vec(types, (b, len), &self.device)?;
            let mask = Tensor::from_vec(mask, (b, len), &self.device)?;
            let hidden = self.model.forward(&ids, &types, Some(&mask))?; // [b, len, hidden]
            let maskf = mask.to_dtype(DType::F32)?.unsqueeze(2)?; // [b, len, 1]
            let summed = hidden.broadcast_mul(&maskf)?.sum(1)?; // [b, hidden]
            let counts = maskf.sum(1)?.clamp(1e-9f32, f32::MAX)?; // [b, 1]
            let mean = summed.broadcast_div(&counts)?;
            let norm = mean.sqr()?.sum_keepdim(1)?.sqrt()?.clamp(1e-12f32, f32::MAX)?;
            let unit = mean.broadcast_div(&norm)?;
            for row in unit.to_dtype(DType::F32)?.to_vec2::<f32>()? {
                out.push(row);
            }
        }
        Ok((out, tokens))
    }
}
