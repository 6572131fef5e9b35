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
}

struct Shared {
    generation: AtomicU64,
    job: UnsafeCell<Job>,
    /// The current region's low 32 generation bits (high half) and how many
    /// of its tasks are still unclaimed (low half). Tasks are claimed by a
    /// compare-and-swap on the whole word, so a worker that wakes late for
    /// a region that is already fully claimed takes nothing and reads
    /// nothing of it.
    claim: AtomicU64,
    /// Tasks of the current region that have finished.
    completed: AtomicUsize,
    panicked: AtomicBool,
    sleeping: Vec<AtomicBool>,
    threads: OnceLock<Vec<Thread>>,
}

// SAFETY: `job` is written only by the caller holding `Pool::lock`, before
// it publishes the region through `claim`, and only when every task of the
// previous region has completed; it is read only by a thread that has just
// claimed a task of the current region (which cannot complete without it).
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
            job: UnsafeCell::new(Job { f: &noop as &(dyn Fn(usize) + Sync) }),
            claim: AtomicU64::new(0),
            completed: AtomicUsize::new(0),
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
    ///
    /// The caller waits only for tasks that a worker has actually claimed:
    /// on a busy machine a worker may be descheduled for milliseconds, and
    /// waiting for it to check in to a region the caller has already
    /// finished alone would stall every step.
    pub fn run(&self, n: usize, f: &(dyn Fn(usize) + Sync)) {
        if self.workers == 0 || n <= 1 {
            (0..n).for_each(f);
            return;
        }
        assert!(n < (1 << 32), "too many tasks for one region");
        // One region at a time (tests call in from several threads).
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let sh = self.shared;
        let gen = sh.generation.load(Ordering::Relaxed).wrapping_add(1);
        // SAFETY: the pointer outlives its use: this function does not
        // return before every claimed task has finished.
        let f_static: *const (dyn Fn(usize) + Sync + 'static) = unsafe { std::mem::transmute(f) };
        unsafe { *sh.job.get() = Job { f: f_static } };
        sh.completed.store(0, Ordering::Relaxed);
        sh.claim.store((gen as u32 as u64) << 32 | n as u64, Ordering::Release);
        sh.generation.store(gen, Ordering::SeqCst);
        if let Some(threads) = sh.threads.get() {
            for (w, t) in threads.iter().enumerate() {
                if sh.sleeping[w].load(Ordering::SeqCst) {
                    t.unpark();
                }
            }
        }
        let mine = work(sh, gen);
        while sh.completed.load(Ordering::Acquire) != n {
            std::hint::spin_loop();
        }
        if let Some(p) = mine {
            sh.panicked.store(false, Ordering::Relaxed);
            resume_unwind(p);
        }
        if sh.panicked.swap(false, Ordering::Relaxed) {
            panic!("a parallel task panicked");
        }
    }
}

/// Claims one unclaimed task of generation `gen`: Some(index), or None when
/// that region has none left (or is over).
fn take(sh: &Shared, gen: u64) -> Option<usize> {
    let mut c = sh.claim.load(Ordering::Acquire);
    loop {
        let left = c & 0xffff_ffff;
        if c >> 32 != gen as u32 as u64 || left == 0 {
            return None;
        }
        match sh.claim.compare_exchange_weak(c, c - 1, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Some(left as usize - 1),
            Err(now) => c = now,
        }
    }
}

/// Runs tasks of generation `gen` until none are left; returns the first
/// panic payload of its own tasks (panics are counted as completed so the
/// region still ends).
fn work(sh: &Shared, gen: u64) -> Option<Box<dyn std::any::Any + Send>> {
    let mut first = None;
    while let Some(i) = take(sh, gen) {
        // SAFETY: see `Shared`: a claimed task keeps the job alive.
        let f = unsafe { &*(*sh.job.get()).f };
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| f(i))) {
            // Flagged before the completion count moves, so the caller
            // sees it once it sees the region done.
            sh.panicked.store(true, Ordering::Relaxed);
            first.get_or_insert(p);
        }
        sh.completed.fetch_add(1, Ordering::Release);
    }
    first
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
        // A panic is already flagged for the caller to re-raise.
        let _ = work(sh, seen);
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
