//! What every experiment shares: the options it takes ([`CommonOptions`]), applying their
//! real-time settings to a measuring thread ([`apply_rt`]) and drawing its progress
//! ([`progress_bar`]).
//!
//! What it must never do: import anything of the lab — the experiments, the conditions a
//! report records and the report itself all stand on it.

/// The options every experiment takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommonOptions {
    /// Real-time settings for the measuring thread(s).
    pub rt: rtloop_rt::setup::RtSettings,
    /// Background load workers to run during the measurement (0: none).
    pub load: usize,
    /// Samples per run.
    pub samples: usize,
    /// Spin for the last N µs before each deadline instead of sleeping, in the experiments
    /// that sleep until a deadline (wakeup, cycle); the others refuse anything but 0.
    pub busy_wait_us: u64,
    /// Show a progress bar (only drawn when stderr is a terminal).
    pub progress: bool,
}

impl Default for CommonOptions {
    fn default() -> Self {
        CommonOptions {
            rt: rtloop_rt::setup::RtSettings::default(),
            load: 0,
            samples: 10_000,
            busy_wait_us: 0,
            progress: false,
        }
    }
}

/// Apply `common.rt` to the calling thread. Returns the refusals (and notes) as sentences;
/// an error when the settings are invalid or a refusal happened under `strict`.
pub fn apply_rt(common: &CommonOptions) -> Result<Vec<String>, rtloop_rt::setup::RtError> {
    let applied = rtloop_rt::setup::apply_to_current_thread(&common.rt)?;
    let mut out: Vec<String> = applied.warnings.iter().map(|w| format!("{}: {}", w.what, w.message)).collect();
    out.extend(applied.notes.iter().map(|w| format!("note ({}): {}", w.what, w.message)));
    Ok(out)
}

/// A progress bar of `len` steps labelled `what`, or `None` when progress was not asked for or
/// stderr is not a terminal (so logs and pipes stay clean).
pub fn progress_bar(common: &CommonOptions, len: u64, what: &str) -> Option<indicatif::ProgressBar> {
    use std::io::IsTerminal;
    if !common.progress || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(len);
    if let Ok(style) = indicatif::ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} ({eta})") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what.to_string());
    Some(bar)
}
