//! The arithmetic of the limits, one scope at a time: a token bucket (`rate`), a day's
//! count (`daily`), the slots of `concurrency`, and the repeats of one call (`loop`).
//! Nothing here locks or knows a rule's name; [`super::Guards`] does.
//!
//! Time: `rate` and `loop` count on the monotonic clock ([`Instant`]), so a wall clock
//! jump changes nothing; `daily` counts calendar days of the wall clock, and a day is only
//! ever left for a later one, so a jump backwards neither resets a count nor starts a day
//! twice.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::civil::Date;
use tokio::sync::Semaphore;

/// A token bucket: `cap` tokens at most, refilled at `per_sec`.
#[derive(Debug, Clone)]
pub(super) struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    pub(super) fn full(cap: f64, now: Instant) -> Bucket {
        Bucket {
            tokens: cap,
            at: now,
        }
    }

    fn refill(&mut self, now: Instant, cap: f64, per_sec: f64) {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + dt * per_sec).min(cap);
        self.at = self.at.max(now);
    }

    /// Takes a token, or says how long until one is there.
    pub(super) fn take(&mut self, now: Instant, cap: f64, per_sec: f64) -> Result<(), Duration> {
        self.refill(now, cap, per_sec);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / per_sec))
        }
    }

    /// Returns a token taken by a call that another limit then refused.
    pub(super) fn give_back(&mut self, cap: f64) {
        self.tokens = (self.tokens + 1.0).min(cap);
    }

    /// Tokens in use (of `cap`) and the time until the next one comes back, as of `now`.
    pub(super) fn used(&self, now: Instant, cap: f64, per_sec: f64) -> (f64, Option<Duration>) {
        let mut b = self.clone();
        b.refill(now, cap, per_sec);
        let used = cap - b.tokens;
        let next = (used > 0.0)
            .then(|| Duration::from_secs_f64((1.0 - b.tokens.fract()).min(1.0) / per_sec));
        (used, next)
    }

    /// How long until the bucket is full again (zero when it is).
    fn full_in(&self, now: Instant, cap: f64, per_sec: f64) -> Duration {
        match self.used(now, cap, per_sec).0 {
            used if used < 1e-9 => Duration::ZERO,
            used => Duration::from_secs_f64(used / per_sec),
        }
    }
}

/// One calendar day's count of cost units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Day {
    pub date: Date,
    pub used: u64,
}

impl Day {
    /// The count that a call on `today` adds to: a new day starts at zero; a `today`
    /// earlier than the day counted (the clock went back) counts on into that day.
    pub(super) fn current(day: Option<Day>, today: Date) -> Day {
        match day {
            Some(d) if d.date >= today => d,
            _ => Day {
                date: today,
                used: 0,
            },
        }
    }

    /// As stored: `{"day": "2026-12-04", "used": 5}`.
    pub(super) fn encode(&self) -> Vec<u8> {
        serde_json::json!({"day": self.date.to_string(), "used": self.used})
            .to_string()
            .into_bytes()
    }

    pub(super) fn decode(bytes: &[u8]) -> Result<Day, String> {
        let v: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        let date = v
            .get("day")
            .and_then(serde_json::Value::as_str)
            .ok_or("no \"day\"")?
            .parse::<Date>()
            .map_err(|e| e.to_string())?;
        let used = v
            .get("used")
            .and_then(serde_json::Value::as_u64)
            .ok_or("no \"used\"")?;
        Ok(Day { date, used })
    }
}

/// The recent times of each distinct call (by its digest) in one scope: only the last
/// `allowed` times of a call matter, and only so many distinct calls are remembered
/// (the oldest forgotten first), so a scope's memory is bounded whatever it calls.
#[derive(Debug, Default)]
pub(super) struct Repeats {
    calls: VecDeque<(u64, VecDeque<Instant>)>,
}

/// Distinct calls remembered per scope. A loop repeats one call; 64 others in between
/// would already have broken it.
const DISTINCT: usize = 64;

impl Repeats {
    /// Counts a call with digest `digest`; refused (with the count, this call included,
    /// and when the oldest repeat leaves the window) when `allowed` identical calls are
    /// already in `window`.
    pub(super) fn take(
        &mut self,
        digest: u64,
        now: Instant,
        window: Duration,
        allowed: u32,
    ) -> Result<(), (u64, Instant)> {
        let allowed = allowed as usize;
        let pos = self.calls.iter().position(|(d, _)| *d == digest);
        let mut times = match pos.and_then(|i| self.calls.remove(i)) {
            Some((_, times)) => times,
            None => VecDeque::with_capacity(allowed.min(16)),
        };
        while times
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= window)
        {
            times.pop_front();
        }
        let verdict = if times.len() >= allowed {
            let oldest = times.front().copied().unwrap_or(now);
            Err((times.len() as u64 + 1, oldest + window))
        } else {
            times.push_back(now);
            Ok(())
        };
        if !times.is_empty() {
            self.calls.push_back((digest, times));
            if self.calls.len() > DISTINCT {
                self.calls.pop_front();
            }
        }
        verdict
    }

    /// Forgets the last time of `digest` (its call was refused by another limit).
    pub(super) fn give_back(&mut self, digest: u64) {
        if let Some((_, times)) = self.calls.iter_mut().find(|(d, _)| *d == digest) {
            times.pop_back();
        }
    }

    /// The most repeated call's count in the window and when its oldest time leaves it.
    pub(super) fn most(&self, now: Instant, window: Duration) -> (u64, Option<Instant>) {
        self.calls
            .iter()
            .map(|(_, times)| {
                let live: Vec<&Instant> = times
                    .iter()
                    .filter(|t| now.saturating_duration_since(**t) < window)
                    .collect();
                (live.len() as u64, live.first().map(|t| **t + window))
            })
            .max_by_key(|(n, _)| *n)
            .unwrap_or((0, None))
    }

    /// How long until no time of any call is left in `window` (zero when none is).
    fn quiet_in(&self, now: Instant, window: Duration) -> Duration {
        self.calls
            .iter()
            .filter_map(|(_, times)| times.back())
            .map(|t| (*t + window).saturating_duration_since(now))
            .max()
            .unwrap_or_default()
    }
}

/// One scope's counters under one rule.
#[derive(Debug, Default)]
pub(super) struct ScopeState {
    pub bucket: Option<Bucket>,
    pub day: Option<Day>,
    /// The slots of `concurrency`, made for `max` slots.
    pub slots: Option<(u32, Arc<Semaphore>)>,
    pub repeats: Repeats,
}

/// How long a scope that holds a `concurrency` slot waits for its next look: the slot
/// goes with its call, which nothing here hears of.
const BUSY_LOOK: Duration = Duration::from_secs(30);

impl ScopeState {
    /// How long until dropping the scope would lose nothing (`None`: nothing now): no call
    /// holds a slot, the bucket is full again, no repeat is in the window, no count of
    /// `today` or later. `today` comes with the time left until it ends.
    pub(super) fn idle_in(
        &self,
        now: Instant,
        rate: Option<(f64, f64)>,
        window: Option<Duration>,
        today: Option<(Date, Duration)>,
    ) -> Option<Duration> {
        let bucket = match (&self.bucket, rate) {
            (Some(b), Some((cap, per_sec))) => b.full_in(now, cap, per_sec),
            _ => Duration::ZERO,
        };
        let slots = match &self.slots {
            Some((max, s)) if s.available_permits() < *max as usize => BUSY_LOOK,
            _ => Duration::ZERO,
        };
        let repeats = window.map_or(Duration::ZERO, |w| self.repeats.quiet_in(now, w));
        let day = match (self.day, today) {
            (Some(d), Some((t, _))) if d.date < t => Duration::ZERO,
            (Some(_), Some((_, left))) => left,
            // A count without a daily limit to end it (none now): kept, looked at daily.
            (Some(_), None) => Duration::from_secs(24 * 3600),
            (None, _) => Duration::ZERO,
        };
        Some(bucket.max(slots).max(repeats).max(day)).filter(|d| !d.is_zero())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_never_goes_negative_and_refills() {
        let t0 = Instant::now();
        let mut b = Bucket::full(2.0, t0);
        assert!(b.take(t0, 2.0, 1.0).is_ok());
        assert!(b.take(t0, 2.0, 1.0).is_ok());
        let wait = b.take(t0, 2.0, 1.0).unwrap_err();
        assert!(wait <= Duration::from_secs(1) && wait > Duration::from_millis(900));
        // An earlier instant (as a clock going back would give) refills nothing and
        // leaves the bucket as it was.
        assert!(b.take(t0 - Duration::from_secs(5), 2.0, 1.0).is_err());
        assert!(b.tokens >= 0.0);
        assert!(b.take(t0 + Duration::from_secs(1), 2.0, 1.0).is_ok());
    }

    #[test]
    fn a_day_is_left_only_for_a_later_one() {
        let d1: Date = "2026-12-04".parse().unwrap();
        let d0: Date = "2026-12-03".parse().unwrap();
        let d2: Date = "2026-12-05".parse().unwrap();
        let day = Day { date: d1, used: 7 };
        assert_eq!(Day::current(Some(day), d1), day);
        // The clock went back a day: the count goes on, no second reset.
        assert_eq!(Day::current(Some(day), d0), day);
        assert_eq!(Day::current(Some(day), d2), Day { date: d2, used: 0 });
        assert_eq!(Day::decode(&day.encode()), Ok(day));
        assert!(Day::decode(b"{\"day\":\"nope\",\"used\":1}").is_err());
        assert!(Day::decode(b"\xff").is_err());
    }

    #[test]
    fn repeats_refuse_the_call_after_the_allowed_ones_then_let_it_pass_again() {
        let t0 = Instant::now();
        let w = Duration::from_secs(60);
        let mut r = Repeats::default();
        for i in 0..3 {
            assert!(r.take(1, t0 + Duration::from_secs(i), w, 3).is_ok());
        }
        let (count, until) = r.take(1, t0 + Duration::from_secs(3), w, 3).unwrap_err();
        assert_eq!((count, until), (4, t0 + w));
        // Another call is not this one.
        assert!(r.take(2, t0 + Duration::from_secs(3), w, 3).is_ok());
        // Once the first leaves the window, one more passes.
        assert!(r.take(1, t0 + w, w, 3).is_ok());
        assert!(r.take(1, t0 + w, w, 3).is_err());
    }

    #[test]
    fn repeats_remember_a_bounded_number_of_calls() {
        let t0 = Instant::now();
        let mut r = Repeats::default();
        for d in 0..10_000 {
            let _ = r.take(d, t0, Duration::from_secs(60), 8);
        }
        assert_eq!(r.calls.len(), DISTINCT);
    }
}
