//! `switchyard-engine`: reads Request frames on stdin, writes Event frames on
//! stdout, logs on stderr. `switchyard-engine bench ...` measures throughput.

use std::io::{BufWriter, Write};
use std::process::ExitCode;
use std::sync::mpsc;

use switchyard_engine::engine::{Engine, Incoming};
use switchyard_engine::protocol::{self, event, Event, Ready, Request};

const USAGE: &str = "usage:
  switchyard-engine [--device auto|cpu|cuda|metal] [--llama-backend auto|kernels|candle] [--threads N]
  switchyard-engine bench --model PATH.gguf [--streams 1,4,8,16] [--tokens 64] [--prompt-tokens 128] [--threads N]
                          [--constrained-streams 8 (0: skip the JSON Schema mask measurement)]
                          [--device cpu|cuda|metal] [--llama-backend auto|kernels|candle]
  switchyard-engine parity [--model PATH.gguf] [--device auto|cpu|cuda|metal] [--steps 16]
  switchyard-engine gguf-slice IN.gguf OUT.gguf --layers N
  switchyard-engine plan --model PATH.gguf [--layers START-END] [--budget BYTES] [--batch B --context C] [--json]
  switchyard-engine gguf-random OUT.gguf --arch llama|qwen2|gemma3 --type q4_k|q5_k|q6_k|q8_0|q5_0|q4_1 [--vocab-from REAL.gguf] [--seed N]
                          [--shape small|qwen2.5-7b]";

fn init_threads(threads: Option<usize>) {
    let n = threads
        .or_else(|| std::env::var("SWITCHYARD_THREADS").ok().and_then(|v| v.parse().ok()))
        .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
    if let Err(e) = rayon::ThreadPoolBuilder::new().num_threads(n.max(1)).build_global() {
        eprintln!("switchyard-engine: thread pool: {e}");
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(|s| s.as_str()) == Some("bench") {
        let opts = match switchyard_engine::bench::BenchOptions::parse(&args[1..]) {
            Ok(o) => o,
            Err(e) => {
                eprintln!("{e}\n{USAGE}");
                return ExitCode::from(2);
            }
        };
        init_threads(opts.threads);
        return match switchyard_engine::bench::run(&opts) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("bench failed: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    if args.first().map(|s| s.as_str()) == Some("gguf-slice") {
        return match switchyard_engine::slice::run(&args[1..]) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("gguf-slice: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    if args.first().map(|s| s.as_str()) == Some("plan") {
        return match switchyard_engine::plan::run(&args[1..]) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("plan: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    if args.first().map(|s| s.as_str()) == Some("gguf-random") {
        return match switchyard_engine::random_gguf::run(&args[1..]) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("gguf-random: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    if args.first().map(|s| s.as_str()) == Some("parity") {
        init_threads(None);
        return match switchyard_engine::parity::run(&args[1..]) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("parity: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    let mut device = "auto".to_string();
    let mut backend = "auto".to_string();
    let mut threads = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--device" => device = it.next().cloned().unwrap_or_default(),
            "--llama-backend" => backend = it.next().cloned().unwrap_or_default(),
            "--threads" => threads = it.next().and_then(|v| v.parse().ok()),
            "--version" => {
                println!("switchyard-engine {}", switchyard_engine::VERSION);
                return ExitCode::SUCCESS;
            }
            "-h" | "--help" => {
                eprintln!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!("unknown argument {other:?}\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    let (dev, dev_name) = match switchyard_engine::devices::open(&device) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("switchyard-engine: device {device:?} unavailable: {e}");
            return ExitCode::from(3);
        }
    };
    let backend = match switchyard_engine::devices::llama_backend(&backend, &dev) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("{e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    init_threads(threads);
    eprintln!(
        "switchyard-engine {} on {dev_name}, llama on {}, {} threads, kernels {:?}",
        switchyard_engine::VERSION,
        backend.name(),
        rayon::current_num_threads(),
        switchyard_engine::kernels::isa()
    );

    let (ev_tx, ev_rx) = mpsc::channel::<Event>();
    // Writer: the only code that touches stdout. Flushes once the queue runs
    // dry, so bursts of events cost one syscall and single events go out now.
    let writer = std::thread::spawn(move || {
        let stdout = std::io::stdout();
        let mut w = BufWriter::new(stdout.lock());
        while let Ok(ev) = ev_rx.recv() {
            let mut next = Some(ev);
            while let Some(ev) = next {
                let buf = prost::Message::encode_length_delimited_to_vec(&ev);
                if w.write_all(&buf).is_err() {
                    return;
                }
                next = ev_rx.try_recv().ok();
            }
            if w.flush().is_err() {
                return;
            }
        }
        let _ = w.flush();
    });
    let _ = ev_tx.send(Event::new(
        "",
        event::Kind::Ready(Ready { device: dev_name.clone(), version: switchyard_engine::VERSION.to_string() }),
    ));

    let (req_tx, req_rx) = mpsc::channel::<Incoming>();
    // Reader: decodes frames off stdin so the engine loop never blocks on I/O
    // while sequences are decoding.
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        let mut r = std::io::BufReader::new(stdin.lock());
        loop {
            match protocol::read_frame(&mut r) {
                Ok(Some(buf)) => {
                    let msg = match <Request as prost::Message>::decode(buf.as_slice()) {
                        Ok(req) => Incoming::Request(req),
                        Err(e) => Incoming::Malformed(e.to_string()),
                    };
                    if req_tx.send(msg).is_err() {
                        return;
                    }
                }
                Ok(None) => return,
                Err(e) => {
                    eprintln!("switchyard-engine: reading stdin: {e}; treating as EOF");
                    return;
                }
            }
        }
    });

    let code = Engine::new(dev, dev_name, backend, ev_tx).run(req_rx);
    // Engine dropped its sender: the writer drains what is left and exits.
    let _ = writer.join();
    code
}
