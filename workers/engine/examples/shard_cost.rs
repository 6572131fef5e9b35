//! What one shard step costs, by block range and batch: the engine's own CPU
//! time per decode step (and wall time) for `BATCH` sequences of one row
//! each, on a thread pool of `THREADS`, with no agent, pipe or socket in the
//! way. `bench split`'s shards are 1 thread each: a pipeline runs at its
//! slowest shard's pace, so this is how to see which one that is (issue 11,
//! docs/BENCHMARKS.md "Split models"). CPU time, from /proc/self/stat, is
//! steadier than wall time on a shared box.
//!
//! cargo run --release --example shard_cost -- THREADS START-END[,START-END…] BATCH [STEPS]
//! e.g. `… -- 1 0-15,15-30,0-19,19-30 4 150`
use std::time::Instant;
use switchyard_engine::llama::{Backend, LlamaModel};
use switchyard_engine::protocol::{DType, ShardOpen, ShardSeqRows, ShardStep, Tensor};
use switchyard_engine::shard::Shards;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 4 {
        eprintln!("usage: shard_cost THREADS START-END[,START-END…] BATCH [STEPS]");
        std::process::exit(2);
    }
    let threads: usize = a[1].parse().expect("THREADS");
    rayon::ThreadPoolBuilder::new().num_threads(threads).build_global().unwrap();
    let batch: usize = a[3].parse().expect("BATCH");
    let steps: usize = a.get(4).map(|s| s.parse().expect("STEPS")).unwrap_or(60);
    let path = switchyard_engine::models_dir().join("smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf");
    for r in a[2].split(',') {
        let (s, e) = r.split_once('-').expect("START-END");
        let (s, e): (usize, usize) = (s.parse().unwrap(), e.parse().unwrap());
        let m = LlamaModel::load_layers(&path, Backend::Kernels, Some(s..e)).unwrap();
        let hidden = m.cfg.hidden;
        let mut sh = Shards::default();
        // Room for a 12-row prefill and every step (greedy sampling of these ids need not stop early: max_tokens covers them all).
        let capacity = (steps + 16) as u32;
        for i in 0..batch {
            sh.open(&m, capacity as usize, ShardOpen { model: "m".into(), seq_id: format!("s{i}"), capacity, max_tokens: capacity, ..Default::default() }).unwrap();
        }
        let first = s == 0;
        let mk = |rows: u32| -> ShardStep {
            let seqs: Vec<ShardSeqRows> = (0..batch)
                .map(|i| ShardSeqRows { seq_id: format!("s{i}"), rows, token_ids: if first { vec![100 + i as u32; rows as usize] } else { vec![] } })
                .collect();
            let n = batch * rows as usize;
            let acts = (!first).then(|| Tensor::from_f32_as(&[n, hidden], &vec![0.01f32; n * hidden], DType::DtypeF32));
            ShardStep { model: "m".into(), seqs, activations: acts, out_dtype: DType::DtypeF32 as i32 }
        };
        sh.step(&m, mk(12)).unwrap();
        let mut times = Vec::with_capacity(steps);
        let c0 = cpu_ms();
        let w0 = Instant::now();
        for _ in 0..steps {
            let st = mk(1);
            let t0 = Instant::now();
            sh.step(&m, st).unwrap();
            times.push(t0.elapsed().as_secs_f64() * 1000.0);
        }
        let cpu = (cpu_ms() - c0) / steps as f64;
        let wall = w0.elapsed().as_secs_f64() * 1000.0 / steps as f64;
        times.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!("threads {threads} blocks {s}-{e} batch {batch}: CPU {cpu:.2} ms/step (wall {wall:.2}; median {:.2}, min {:.2})", times[times.len() / 2], times[0]);
    }
}

/// This process's user + system CPU time (ms; the kernel counts it in 10 ms ticks).
fn cpu_ms() -> f64 {
    let st = std::fs::read_to_string("/proc/self/stat").unwrap();
    let f: Vec<&str> = st[st.rfind(')').unwrap() + 2..].split(' ').collect();
    (f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap()) * 10.0
}
