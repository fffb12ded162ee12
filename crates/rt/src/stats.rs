//! Latency histograms that can be recorded on the real-time thread.
//!
//! A thin wrapper around `hdrhistogram` sized once (1 ns .. 10 s, 3 significant digits)
//! so that recording never allocates; values beyond the range saturate and are counted.
//!
//! What it must never do: allocate, lock or print in [`Latency::record`] or
//! [`Latency::reset`] — both run on the real-time thread. Only [`Latency::new`] allocates.

use hdrhistogram::Histogram;
use serde::Serialize;

/// A latency histogram in nanoseconds.
pub struct Latency {
    hist: Histogram<u64>,
    saturated: u64,
}

/// Percentiles in microseconds, as the summaries print them.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest sample.
    pub max: f64,
    /// Smallest sample.
    pub min: f64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Number of samples.
    pub samples: u64,
}

impl Default for Latency {
    fn default() -> Self {
        Self::new()
    }
}

impl Latency {
    /// Highest value tracked exactly: 10 s.
    pub const MAX_NS: u64 = 10_000_000_000;

    /// An empty histogram (allocates here, never in `record`).
    pub fn new() -> Self {
        let mut hist = Histogram::new_with_bounds(1, Self::MAX_NS, 3).expect("static histogram bounds are valid");
        hist.auto(false);
        Latency { hist, saturated: 0 }
    }

    /// Record one sample; never allocates.
    pub fn record(&mut self, ns: u64) {
        let v = ns.max(1);
        if v > Self::MAX_NS {
            self.saturated += 1;
        }
        self.hist.saturating_record(v.min(Self::MAX_NS));
    }

    /// Forget every sample (e.g. the warm-up cycles); never allocates.
    pub fn reset(&mut self) {
        self.hist.reset();
        self.saturated = 0;
    }

    /// Samples recorded.
    pub fn len(&self) -> u64 {
        self.hist.len()
    }

    /// No samples yet.
    pub fn is_empty(&self) -> bool {
        self.hist.is_empty()
    }

    /// Samples above the tracked range.
    pub fn saturated(&self) -> u64 {
        self.saturated
    }

    /// The summary in microseconds (zeros when empty).
    pub fn percentiles_us(&self) -> Percentiles {
        if self.hist.is_empty() {
            return Percentiles { p50: 0.0, p99: 0.0, max: 0.0, min: 0.0, mean: 0.0, samples: 0 };
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        Percentiles {
            p50: us(self.hist.value_at_quantile(0.5)),
            p99: us(self.hist.value_at_quantile(0.99)),
            max: us(self.hist.max()),
            min: us(self.hist.min()),
            mean: self.hist.mean() / 1000.0,
            samples: self.hist.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_follow_the_samples() {
        let mut l = Latency::new();
        for i in 1..=1000u64 {
            l.record(i * 1000);
        }
        let p = l.percentiles_us();
        assert_eq!(p.samples, 1000);
        assert!((p.p50 - 500.0).abs() <= 1.0, "{p:?}");
        assert!((p.p99 - 990.0).abs() <= 1.0, "{p:?}");
        assert!((p.max - 1000.0).abs() <= 1.0, "{p:?}");
        l.record(u64::MAX);
        assert_eq!(l.saturated(), 1);
    }
}
