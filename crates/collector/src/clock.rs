//! Clock correlation: an agent's clock offset against the collector's, from ping/pong round
//! trips (Cristian's method). The sample with the shortest round trip among the recent ones
//! wins: its error bound is half that round trip.

use crate::store::ClockEstimate;

/// How many recent samples the estimate is chosen from: enough to ride out a few slow round
/// trips, few enough to follow drift.
const WINDOW: usize = 32;

#[derive(Clone, Copy, Debug)]
struct Sample {
    offset_ns: i64,
    round_trip_ns: u64,
}

/// Keeps the recent samples of one agent.
#[derive(Debug, Default)]
pub struct ClockEstimator {
    recent: Vec<Sample>,
    next: usize,
    samples: u32,
    best: Option<ClockEstimate>,
}

impl ClockEstimator {
    pub fn new() -> ClockEstimator {
        ClockEstimator::default()
    }

    /// Adds a round trip: the collector sent at `sent_ns`, the agent read its clock as
    /// `agent_ns`, the answer came back at `received_ns`. Returns whether the estimate changed.
    pub fn sample(&mut self, sent_ns: u64, agent_ns: u64, received_ns: u64) -> bool {
        if received_ns < sent_ns {
            return false; // the collector's clock stepped back: no sample.
        }
        let round_trip_ns = received_ns - sent_ns;
        let midpoint = sent_ns as i128 + i128::from(round_trip_ns / 2);
        let offset_ns =
            (agent_ns as i128 - midpoint).clamp(i64::MIN.into(), i64::MAX.into()) as i64;
        let sample = Sample {
            offset_ns,
            round_trip_ns,
        };
        if self.recent.len() < WINDOW {
            self.recent.push(sample);
        } else {
            self.recent[self.next] = sample;
        }
        self.next = (self.next + 1) % WINDOW;
        self.samples = self.samples.saturating_add(1);
        let chosen = self
            .recent
            .iter()
            .min_by_key(|sample| sample.round_trip_ns)
            .expect("just pushed one");
        let estimate = ClockEstimate {
            offset_ns: chosen.offset_ns,
            error_ns: chosen.round_trip_ns.div_ceil(2),
            samples: self.samples,
        };
        let changed = self.best.is_none_or(|best| {
            best.offset_ns != estimate.offset_ns
                || best.error_ns != estimate.error_ns
                || self.samples % 16 == 0
        });
        self.best = Some(estimate);
        changed
    }

    pub fn estimate(&self) -> Option<ClockEstimate> {
        self.best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shortest_round_trip_gives_the_estimate() {
        let mut clock = ClockEstimator::new();
        // The agent is 5 ms ahead. A slow trip (10 ms, asymmetric) is off by up to 5 ms;
        // a quick one (200 µs) pins the offset within 100 µs.
        clock.sample(1_000_000_000, 1_009_000_000, 1_010_000_000);
        clock.sample(2_000_000_000, 2_005_100_000, 2_000_200_000);
        let estimate = clock.estimate().unwrap();
        assert_eq!(estimate.offset_ns, 5_000_000);
        assert_eq!(estimate.error_ns, 100_000);
        assert_eq!(estimate.samples, 2);
        // Truth lies within the bound.
        assert!((estimate.offset_ns - 5_000_000).unsigned_abs() <= estimate.error_ns);
    }

    #[test]
    fn a_clock_stepping_back_gives_no_sample() {
        let mut clock = ClockEstimator::new();
        assert!(!clock.sample(10, 5, 9));
        assert!(clock.estimate().is_none());
    }
}
