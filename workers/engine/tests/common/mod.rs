//! Shared test helpers: model and fixture paths (missing files fail loudly:
//! CI fetches them first, so absence is a setup bug, not a reason to skip),
//! and a driver for the engine binary over its stdio protocol.
#![allow(dead_code)]

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

use switchyard_engine::protocol::{self, event, request, Event, Request};

pub fn smollm_path() -> PathBuf {
    let p = switchyard_engine::models_dir().join("smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        p.exists(),
        "model file {} is missing: fetch the models first or point SWITCHYARD_MODELS_DIR at them",
        p.display()
    );
    p
}

pub fn minilm_dir() -> PathBuf {
    let p = switchyard_engine::models_dir().join("all-minilm-l6-v2");
    assert!(
        p.join("model.safetensors").exists() && p.join("tokenizer.json").exists(),
        "MiniLM files are missing under {}: fetch the models first or point SWITCHYARD_MODELS_DIR at them",
        p.display()
    );
    p
}

pub fn fixture(name: &str) -> serde_json::Value {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("fixture {} unreadable: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("fixture {} is not JSON: {e}", p.display()))
}

pub const TIMEOUT: Duration = Duration::from_secs(120);

pub struct EngineProc {
    pub child: Child,
    stdin: Option<ChildStdin>,
    events: Receiver<Event>,
    /// Events read while waiting for another request id.
    backlog: Vec<Event>,
    pub ready: Event,
}

impl EngineProc {
    pub fn spawn() -> Self {
        Self::spawn_with(&["--device", "cpu"], &[])
    }

    pub fn spawn_with(args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_switchyard-engine"))
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawning switchyard-engine");
        let stdin = child.stdin.take();
        let mut stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            while let Ok(Some(ev)) = protocol::read_message::<Event, _>(&mut stdout) {
                if tx.send(ev).is_err() {
                    break;
                }
            }
        });
        let ready = rx.recv_timeout(TIMEOUT).expect("no Ready event");
        assert!(matches!(ready.kind, Some(event::Kind::Ready(_))), "first event must be Ready, got {ready:?}");
        EngineProc { child, stdin, events: rx, backlog: Vec::new(), ready }
    }

    pub fn send(&mut self, id: &str, kind: request::Kind) {
        let req = Request { request_id: id.to_string(), kind: Some(kind) };
        protocol::write_message(self.stdin.as_mut().expect("stdin open"), &req).expect("writing request");
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        let w = self.stdin.as_mut().unwrap();
        w.write_all(bytes).unwrap();
        w.flush().unwrap();
    }

    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Next event for `id` (events of other ids are kept for later).
    pub fn next_for(&mut self, id: &str) -> Event {
        if let Some(i) = self.backlog.iter().position(|e| e.request_id == id) {
            return self.backlog.remove(i);
        }
        loop {
            let ev = self.events.recv_timeout(TIMEOUT).unwrap_or_else(|_| panic!("timed out waiting for an event for {id:?}"));
            if ev.request_id == id {
                return ev;
            }
            self.backlog.push(ev);
        }
    }

    /// Whether an event for `id` has arrived and is waiting to be read.
    pub fn has_arrived(&mut self, id: &str) -> bool {
        while let Ok(ev) = self.events.try_recv() {
            self.backlog.push(ev);
        }
        self.backlog.iter().any(|e| e.request_id == id)
    }

    /// All events for `id` up to and including its Done or Error.
    pub fn until_end(&mut self, id: &str) -> Vec<Event> {
        let mut out = Vec::new();
        loop {
            let ev = self.next_for(id);
            let end = matches!(
                ev.kind,
                Some(event::Kind::Done(_))
                    | Some(event::Kind::Error(_))
                    | Some(event::Kind::Loaded(_))
                    | Some(event::Kind::Stats(_))
                    | Some(event::Kind::TokenIds(_))
                    | Some(event::Kind::Embeddings(_))
                    | Some(event::Kind::HiddenStates(_))
                    | Some(event::Kind::Forward(_))
            );
            out.push(ev);
            if end {
                return out;
            }
        }
    }

    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        for _ in 0..600 {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        panic!("engine did not exit within 60 s");
    }
}

impl Drop for EngineProc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Generated ids and text of a finished generation, with its Done.
pub fn collect_generation(events: &[Event]) -> (Vec<u32>, String, protocol::Done) {
    let mut ids = Vec::new();
    let mut text = String::new();
    for ev in events {
        match &ev.kind {
            Some(event::Kind::Tokens(t)) => {
                ids.extend(&t.ids);
                text.push_str(&t.text);
            }
            Some(event::Kind::Done(d)) => return (ids, text, d.clone()),
            Some(event::Kind::Error(e)) => panic!("generation failed: {e:?}"),
            other => panic!("unexpected event {other:?}"),
        }
    }
    panic!("no Done among {} events", events.len());
}

/// `n` English passages of about 100 MiniLM tokens each (75–95 words,
/// varying so chunks pad), the same every run: realistic embeddings inputs.
pub fn embedding_inputs(n: usize) -> Vec<String> {
    const WORDS: &[&str] = &[
        "the", "router", "sends", "each", "request", "to", "a", "worker", "that", "serves", "its", "model", "and", "keeps",
        "latency", "low", "while", "tenants", "share", "capacity", "fairly", "under", "load", "with", "budgets", "held",
        "before", "dispatch", "streams", "resume", "on", "another", "host", "when", "one", "fails", "embeddings", "are",
        "computed", "in", "batches", "of", "sentences", "whose", "vectors", "rank", "similar", "documents", "above",
        "unrelated", "ones", "for", "search", "clustering", "deduplication", "customer", "support", "tickets", "invoices",
        "weather", "reports", "recipes", "travel", "itineraries", "quarterly", "revenue", "grew", "by", "percent",
    ];
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..n)
        .map(|_| {
            let words = 75 + (next() % 21) as usize;
            let mut s = String::new();
            for w in 0..words {
                if w > 0 {
                    s.push(' ');
                }
                s.push_str(WORDS[(next() % WORDS.len() as u64) as usize]);
                if w % 15 == 14 {
                    s.push('.');
                }
            }
            s.push('.');
            s
        })
        .collect()
}

/// Gemma 3 270M in Q4_K_M, where the agent fetches it (`gemma-3-270m`).
pub fn gemma3_path() -> PathBuf {
    let p = switchyard_engine::models_dir().join("gemma-3-270m/gemma-3-270m-q4_k_m.gguf");
    assert!(
        p.exists(),
        "model file {} is missing: fetch it first (switchyard worker --model gemma-3-270m downloads it) or point SWITCHYARD_MODELS_DIR at it",
        p.display()
    );
    p
}
