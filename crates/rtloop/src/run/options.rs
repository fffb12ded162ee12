//! What a run is asked to do ([`RunOptions`]), the hooks around it ([`Hooks`]) and what it
//! says while it runs ([`Notice`], [`ProgressFigures`]).

use super::*;

/// What to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Everything configurable.
    pub config: RunConfig,
    /// Report progress ([`Notice::Progress`]) this often.
    pub progress: Option<Duration>,
    /// Record every cycle to this TLOG0003 file.
    pub log: Option<std::path::PathBuf>,
}

/// Hooks around the real-time section, so a test can count allocations on this thread and
/// stop a run as Ctrl-C would.
pub struct Hooks {
    /// Called on the cycle thread just before the first real-time iteration.
    pub enter_rt: Box<dyn Fn() + Send>,
    /// Called on the cycle thread right after the last one.
    pub leave_rt: Box<dyn Fn() + Send>,
    /// Set to stop the run as Ctrl-C / SIGTERM does (checked with the signal flag).
    pub stop: Arc<AtomicBool>,
    /// The operator's commands (zenoh's command key sets them; so may you).
    pub remote: Arc<crate::live::RemoteControl>,
    /// Live publishers of your own, besides those the configuration asks for.
    pub publishers: Vec<crate::live::Publisher>,
    /// Told what the run has to say while it runs (warnings, progress), on the thread that
    /// called the run.
    pub notice: Box<dyn FnMut(&Notice) + Send>,
}

impl Default for Hooks {
    fn default() -> Self {
        Hooks {
            enter_rt: Box::new(|| {}),
            leave_rt: Box::new(|| {}),
            stop: Arc::new(AtomicBool::new(false)),
            remote: Arc::new(crate::live::RemoteControl::new()),
            publishers: Vec::new(),
            notice: Box::new(|_: &Notice| {}),
        }
    }
}

/// Live counters shared with the main thread (atomics only: no lock on the loop thread).
#[derive(Default)]
pub struct Progress {
    /// Cycles completed.
    pub cycles: AtomicU64,
    /// Overruns so far.
    pub overruns: AtomicU64,
    /// Missing replies so far.
    pub missing: AtomicU64,
    /// Duration of the last cycle.
    pub last_cycle_ns: AtomicU64,
    /// Longest cycle so far.
    pub max_cycle_ns: AtomicU64,
    /// The loop has finished.
    pub done: AtomicBool,
}

/// Hand `notify` the progress figures every `every` until the loop is done, then
/// [`Notice::ProgressEnd`]; the cycle thread wakes this thread when it ends, so the run never
/// outlasts its loop.
pub(super) fn report_progress(
    progress: &Progress,
    config: &RunConfig,
    every: Duration,
    notify: &mut dyn FnMut(&Notice),
) {
    let total = config.periods();
    let mut next = Instant::now() + every;
    while !progress.done.load(Ordering::Acquire) {
        let now = Instant::now();
        if now < next {
            std::thread::park_timeout(next - now);
            continue;
        }
        next += every;
        let cycles = progress.cycles.load(Ordering::Relaxed);
        notify(&Notice::Progress(ProgressFigures {
            time_s: cycles as f64 / config.rate_hz,
            duration_s: config.duration_s,
            cycles,
            total_cycles: total,
            last_cycle_us: progress.last_cycle_ns.load(Ordering::Relaxed) as f64 / 1000.0,
            max_cycle_us: progress.max_cycle_ns.load(Ordering::Relaxed) as f64 / 1000.0,
            overruns: progress.overruns.load(Ordering::Relaxed),
            missing: progress.missing.load(Ordering::Relaxed),
        }));
    }
    notify(&Notice::ProgressEnd);
}
