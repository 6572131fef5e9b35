//! `switchyard-engine`: reads Request frames on stdin, writes Event frames on
//! stdout, logs on stderr. `switchyard-engine bench ...` measures throughput.

use std::io::{BufWriter, Write};
use std::process::ExitCode;
use std::sync::mpsc;

use candle_core::Device;
use switchyard_engine::engine::{Engine, Incoming};
use switchyard_engine::protocol::{self, event, Event, Ready, Request};

const USAGE: &str = "usage:
  switchyard-engine [--device auto|cpu|cuda|metal] [--threads N]
  switchyard-engine bench --model PATH.gguf [--streams 1,4,8,16] [--tokens 64] [--prompt-tokens 128] [--threads N]";

fn parse_device(name: &str) -> Result<(Device, String), String> {
    match name {
        "cpu" => Ok((Device::Cpu, "cpu".into())),
        "cuda" => {
            if !cfg!(feature = "cuda") {
                return Err("this binary was built without the `cuda` feature".into());
            }
            let dev = Device::new_cuda(0).map_err(|e| format!("CUDA device 0: {e}"))?;
            // Touch the device so a broken driver fails here, not mid-request.
            candle_core::Tensor::zeros(4, candle_core::DType::F32, &dev).map_err(|e| format!("CUDA device 0: {e}"))?;
            Ok((dev, "cuda:0".into()))
        }
        "metal" => {
            if !cfg!(feature = "metal") {
                return Err("this binary was built without the `metal` feature".into());
            }
            let dev = Device::new_metal(0).map_err(|e| format!("Metal device 0: {e}"))?;
            candle_core::Tensor::zeros(4, candle_core::DType::F32, &dev).map_err(|e| format!("Metal device 0: {e}"))?;
            Ok((dev, "metal".into()))
        }
        "auto" => {
            if cfg!(feature = "cuda") && candle_core::utils::cuda_is_available() {
                if let Ok(d) = parse_device("cuda") {
                    return Ok(d);
                }
            }
            if cfg!(feature = "metal") && candle_core::utils::metal_is_available() {
                if let Ok(d) = parse_device("metal") {
                    return Ok(d);
                }
            }
            Ok((Device::Cpu, "cpu".into()))
        }
        other => Err(format!("unknown device {other:?} (auto, cpu, cuda or metal)")),
    }
}

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
    let mut device = "auto".to_string();
    let mut threads = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--device" => device = it.next().cloned().unwrap_or_default(),
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
    let (dev, dev_name) = match parse_device(&device) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("switchyard-engine: device {device:?} unavailable: {e}");
            return ExitCode::from(3);
        }
    };
    init_threads(threads);
    eprintln!(
        "switchyard-engine {} on {dev_name}, {} threads, kernels {:?}",
        switchyard_engine::VERSION,
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

    Engine::new(dev, dev_name, ev_tx).run(req_rx);
    // Engine dropped its sender: the writer drains what is left and exits.
    let _ = writer.join();
    ExitCode::SUCCESS
}
