//! A small fork-join pool for the forward pass. A decode step has ~120 short
//! parallel regions (a matmul each, tens of microseconds); rayon's workers
//! yield and sleep between them, and the wake-ups cost more than the regions
//! on a 2-core box. These workers spin for a while after each region (as
//! llama.cpp's do), then park, so an idle engine does not burn CPU.

use std::cell::UnsafeCell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// How long a worker spins for the next region before parking.
const SPIN: Duration = Duration::from_micros(300);

struct Job {
    f: *const (dyn Fn(usize) + Sync + 'static),
    n: usize,
}

struct Shared {
    generation: AtomicU64,
    job: UnsafeCell<Job>,
    next: AtomicUsize,
    /// Workers that have not finished the current generation.
    active: AtomicUsize,
    panicked: AtomicBool,
    sleeping: Vec<AtomicBool>,
    threads: OnceLock<Vec<Thread>>,
}

// SAFETY: `job` is written only by the caller holding `Pool::lock` while no
// worker reads it (all finished the previous generation), and read by
// workers only between observing a generation and decrementing `active`.
unsafe impl Sync for Shared {}
unsafe impl Send for Shared {}

pub struct Pool {
    shared: &'static Shared,
    workers: usize,
    lock: Mutex<()>,
}

fn noop(_: usize) {}

/// The process-wide pool: rayon's thread count (set by `--threads`) minus
/// the calling thread, which works too.
pub fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| Pool::new(rayon::current_num_threads().saturating_sub(1)))
}

impl Pool {
    fn new(workers: usize) -> Pool {
        let shared: &'static Shared = Box::leak(Box::new(Shared {
            generation: AtomicU64::new(0),
            job: UnsafeCell::new(Job { f: &noop as &(dyn Fn(usize) + Sync), n: 0 }),
            next: AtomicUsize::new(0),
            active: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            sleeping: (0..workers).map(|_| AtomicBool::new(false)).collect(),
            threads: OnceLock::new(),
        }));
        let threads = (0..workers)
            .map(|w| {
                std::thread::Builder::new()
                    .name(format!("switchyard-par-{w}"))
                    .spawn(move || worker(shared, w))
                    .expect("spawning a pool thread")
                    .thread()
                    .clone()
            })
            .collect();
        let _ = shared.threads.set(threads);
        Pool { shared, workers, lock: Mutex::new(()) }
    }

    /// Calls `f(i)` for every i in 0..n across the pool; returns when all
    /// are done. A panic in any call is re-raised here.
    pub fn run(&self, n: usize, f: &(dyn Fn(usize) + Sync)) {
        if self.workers == 0 || n <= 1 {
            (0..n).for_each(f);
            return;
        }
        // One region at a time (tests call in from several threads).
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let sh = self.shared;
        // SAFETY: the pointer outlives its use: this function does not
        // return before every worker has finished with this generation.
        let f_static: *const (dyn Fn(usize) + Sync + 'static) = unsafe { std::mem::transmute(f) };
        unsafe { *sh.job.get() = Job { f: f_static, n } };
        sh.next.store(0, Ordering::Relaxed);
        sh.active.store(self.workers, Ordering::Relaxed);
        sh.generation.fetch_add(1, Ordering::SeqCst);
        if let Some(threads) = sh.threads.get() {
            for (w, t) in threads.iter().enumerate() {
                if sh.sleeping[w].load(Ordering::SeqCst) {
                    t.unpark();
                }
            }
        }
        let mine = catch_unwind(AssertUnwindSafe(|| work(sh)));
        while sh.active.load(Ordering::Acquire) != 0 {
            std::hint::spin_loop();
        }
        if let Err(p) = mine {
            sh.panicked.store(false, Ordering::Relaxed);
            resume_unwind(p);
        }
        if sh.panicked.swap(false, Ordering::Relaxed) {
            panic!("a parallel task panicked");
        }
    }
}

fn work(sh: &Shared) {
    // SAFETY: see `Shared`.
    let job = unsafe { &*sh.job.get() };
    let f = unsafe { &*job.f };
    loop {
        let i = sh.next.fetch_add(1, Ordering::Relaxed);
        if i >= job.n {
            break;
        }
        f(i);
    }
}

fn worker(sh: &'static Shared, w: usize) {
    let mut seen = 0u64;
    loop {
        let mut since = Instant::now();
        let mut spins = 0u32;
        loop {
            let g = sh.generation.load(Ordering::Acquire);
            if g != seen {
                seen = g;
                break;
            }
            spins += 1;
            if spins % 1024 != 0 || since.elapsed() < SPIN {
                std::hint::spin_loop();
                continue;
            }
            // Going to sleep: publish it, then re-check so a region that
            // started meanwhile is not missed (the caller reads `sleeping`
            // after bumping the generation; both are SeqCst).
            sh.sleeping[w].store(true, Ordering::SeqCst);
            if sh.generation.load(Ordering::SeqCst) == seen {
                std::thread::park();
            }
            sh.sleeping[w].store(false, Ordering::SeqCst);
            since = Instant::now();
        }
        if catch_unwind(AssertUnwindSafe(|| work(sh))).is_err() {
            sh.panicked.store(true, Ordering::Relaxed);
        }
        sh.active.fetch_sub(1, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn runs_every_index_once() {
        let p = Pool::new(3);
        for n in [0, 1, 2, 7, 1000] {
            let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            p.run(n, &|i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        }
    }

    #[test]
    fn survives_idle_parking() {
        let p = Pool::new(1);
        let sum = AtomicUsize::new(0);
        p.run(4, &|i| {
            sum.fetch_add(i, Ordering::Relaxed);
        });
        std::thread::sleep(Duration::from_millis(5));
        p.run(4, &|i| {
            sum.fetch_add(i, Ordering::Relaxed);
        });
        assert_eq!(sum.load(Ordering::Relaxed), 12);
    }

    #[test]
    fn panics_propagate_and_the_pool_keeps_working() {
        let p = Pool::new(2);
        let r = catch_unwind(AssertUnwindSafe(|| {
            p.run(8, &|i| {
                if i == 5 {
                    panic!("boom");
                }
            })
        }));
        assert!(r.is_err());
        let n = AtomicUsize::new(0);
        p.run(8, &|_| {
            n.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(n.load(Ordering::Relaxed), 8);
    }
}
