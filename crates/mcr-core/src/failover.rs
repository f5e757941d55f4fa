//! Failover between a primary input and its backups, without I/O: the
//! stream is taken from one input at a time (the active one). It moves to
//! a backup when the active input has brought nothing for the
//! loss-of-signal time, or (optionally) when its health errors in the last
//! second pass a threshold; it moves back to the primary only once the
//! primary has been healthy, without a break, for the hold time, so a
//! primary that comes and goes never makes the output flap. An operator
//! can force an input (`mcrctl switch`), and give the choice back.
//!
//! Every input's membership is held all the time (a backup is hot), so a
//! switch is a choice of which arriving packets to forward, taken as each
//! packet arrives ([`Failover::packet`]) and on the timer
//! ([`Failover::tick`]).

/// The loss-of-signal time when a rule names none: 200 ms.
pub const DEFAULT_LOSS_OF_SIGNAL_NS: u64 = 200_000_000;
/// The hold time before going back to the primary: 10 s.
pub const DEFAULT_HOLD_NS: u64 = 10_000_000_000;
/// The window health errors are counted over.
const ERROR_WINDOW_NS: u64 = 1_000_000_000;

/// How a rule fails over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// An input that brought nothing for this long has lost its signal.
    pub loss_of_signal_ns: u64,
    /// The primary must be healthy this long before it is taken back.
    pub hold_ns: u64,
    /// More health errors than this within a second make an input
    /// unhealthy (none: errors never do).
    pub error_threshold: Option<u64>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            loss_of_signal_ns: DEFAULT_LOSS_OF_SIGNAL_NS,
            hold_ns: DEFAULT_HOLD_NS,
            error_threshold: None,
        }
    }
}

/// Why the active input changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// The active input lost its signal.
    LossOfSignal,
    /// The active input's errors passed the threshold.
    Errors,
    /// The primary was healthy for the hold time.
    PrimaryBack,
    /// An operator chose the input, or gave the choice back.
    Forced,
}

/// A change of the active input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Switch {
    /// The input the stream came from.
    pub from: usize,
    /// The input it comes from now.
    pub to: usize,
    /// Why.
    pub why: Why,
    /// When.
    pub at_ns: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct Input {
    /// The last packet's arrival.
    last: Option<u64>,
    /// Since when it has been healthy without a break.
    healthy_since: Option<u64>,
    /// Errors in the current window, and when it started.
    errors: u64,
    window_start: u64,
}

/// The choice among a rule's inputs. Input 0 is the primary.
#[derive(Debug, Clone)]
pub struct Failover {
    settings: Settings,
    inputs: Vec<Input>,
    active: usize,
    forced: Option<usize>,
    switches: u64,
    /// When [`Failover::tick`] last decided: a deadline not after it has
    /// been seen to, so it is not one to wake for again.
    decided_at: u64,
    /// When the first packet of any input came: the primary has the
    /// loss-of-signal time from then to bring its first.
    born: Option<u64>,
}

impl Failover {
    /// A choice among `inputs` inputs (at least one), starting on the
    /// primary.
    pub fn new(inputs: usize, settings: Settings) -> Self {
        Failover {
            settings,
            inputs: vec![Input::default(); inputs.max(1)],
            active: 0,
            forced: None,
            switches: 0,
            decided_at: 0,
            born: None,
        }
    }

    /// The input the stream is taken from.
    pub fn active(&self) -> usize {
        self.active
    }

    /// The input an operator forced, if any.
    pub fn forced(&self) -> Option<usize> {
        self.forced
    }

    /// How often the active input changed.
    pub fn switches(&self) -> u64 {
        self.switches
    }

    /// Input `i` has a signal at `now`: a packet within the loss-of-signal
    /// time.
    pub fn has_signal(&self, i: usize, now: u64) -> bool {
        self.inputs[i]
            .last
            .is_some_and(|t| now.saturating_sub(t) < self.settings.loss_of_signal_ns)
    }

    fn healthy(&self, i: usize, now: u64) -> bool {
        let input = &self.inputs[i];
        let too_many = self.settings.error_threshold.is_some_and(|max| input.errors > max);
        self.has_signal(i, now) && !too_many
    }

    /// A packet from input `i` arrived at `now`: whether to forward it
    /// (it comes from the active input, after any switch it brings about),
    /// and the switch, if one happened.
    pub fn packet(&mut self, i: usize, now: u64) -> (bool, Option<Switch>) {
        let Some(input) = self.inputs.get_mut(i) else {
            return (false, None);
        };
        self.born.get_or_insert(now);
        let lost = input
            .last
            .is_none_or(|t| now.saturating_sub(t) >= self.settings.loss_of_signal_ns);
        if lost {
            input.healthy_since = Some(now);
        }
        input.last = Some(now);
        let switch = self.tick(now);
        (i == self.active, switch)
    }

    /// Health errors (RTP gaps, continuity errors) seen on input `i` at
    /// `now`: with a threshold, an input that passes it is unhealthy
    /// until a second goes by below it.
    pub fn errors(&mut self, i: usize, n: u64, now: u64) -> Option<Switch> {
        let input = self.inputs.get_mut(i)?;
        if now.saturating_sub(input.window_start) >= ERROR_WINDOW_NS {
            input.window_start = now;
            input.errors = 0;
        }
        input.errors += n;
        if self.settings.error_threshold.is_some_and(|max| input.errors > max) {
            input.healthy_since = None;
        }
        self.tick(now)
    }

    /// An operator forces input `i` (or, with `None`, gives the choice
    /// back): the switch, if the active input changes.
    pub fn force(&mut self, i: Option<usize>, now: u64) -> Option<Switch> {
        self.forced = i.filter(|&i| i < self.inputs.len());
        match self.forced {
            Some(to) => self.switch(to, Why::Forced, now),
            None => self.tick(now),
        }
    }

    /// When [`Failover::tick`] next has something to decide: the active
    /// input's loss of signal, or the primary's hold time running out.
    pub fn deadline(&self) -> Option<u64> {
        if self.forced.is_some() {
            return None;
        }
        let los = (self.inputs[self.active].last)
            .or(self.born)
            .map(|t| t + self.settings.loss_of_signal_ns);
        let back = (self.active != 0)
            .then(|| self.inputs[0].healthy_since.map(|t| t + self.settings.hold_ns))
            .flatten();
        [los, back].into_iter().flatten().filter(|&t| t > self.decided_at).min()
    }

    /// Decides at `now`: away from an active input that lost its signal
    /// or its health, to the first healthy input (the primary first); back
    /// to the primary once it was healthy for the hold time.
    pub fn tick(&mut self, now: u64) -> Option<Switch> {
        if self.forced.is_some() {
            return None;
        }
        self.decided_at = self.decided_at.max(now);
        // An input's health that errors broke is whole again once a window
        // passes without them.
        for input in &mut self.inputs {
            if now.saturating_sub(input.window_start) >= ERROR_WINDOW_NS && input.errors > 0 {
                input.errors = 0;
                input.window_start = now;
                if input.healthy_since.is_none() && input.last.is_some() {
                    input.healthy_since = Some(now);
                }
            }
        }
        let primary_back = self.active != 0
            && self.healthy(0, now)
            && self.inputs[0]
                .healthy_since
                .is_some_and(|t| now.saturating_sub(t) >= self.settings.hold_ns);
        if primary_back {
            return self.switch(0, Why::PrimaryBack, now);
        }
        if self.healthy(self.active, now) {
            return None;
        }
        // A rule that starts (or a worker that starts again) while every
        // input flows does not leave the primary because a backup's packet
        // happened to come first.
        let first_awaited = self.inputs[self.active].last.is_none()
            && self
                .born
                .is_some_and(|b| now.saturating_sub(b) < self.settings.loss_of_signal_ns);
        if first_awaited {
            return None;
        }
        let why = if self.has_signal(self.active, now) {
            Why::Errors
        } else {
            Why::LossOfSignal
        };
        // Only to an input that brought a packet in the last half of the
        // loss-of-signal time: when a stream ends, the backup that lags
        // the primary is quiet too, and no switch is made.
        let recent = |i: usize| {
            self.inputs[i]
                .last
                .is_some_and(|t| now.saturating_sub(t) < self.settings.loss_of_signal_ns / 2)
        };
        let to = (0..self.inputs.len()).find(|&i| i != self.active && self.healthy(i, now) && recent(i))?;
        self.switch(to, why, now)
    }

    fn switch(&mut self, to: usize, why: Why, now: u64) -> Option<Switch> {
        if to == self.active {
            return None;
        }
        let from = self.active;
        self.active = to;
        self.switches += 1;
        Some(Switch {
            from,
            to,
            why,
            at_ns: now,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: u64 = 1_000_000;

    /// Both inputs send every millisecond from `from` to `to` (ms), input
    /// `i` only while `on(i, t)`; returns what was forwarded (time, input)
    /// and the switches.
    fn run(f: &mut Failover, to: u64, on: impl Fn(usize, u64) -> bool) -> (Vec<(u64, usize)>, Vec<Switch>) {
        let (mut out, mut switches) = (Vec::new(), Vec::new());
        for t in 0..to {
            let now = t * MS;
            switches.extend(f.tick(now));
            for i in 0..2 {
                if on(i, t) {
                    let (forward, s) = f.packet(i, now);
                    switches.extend(s);
                    if forward {
                        out.push((t, i));
                    }
                }
            }
        }
        (out, switches)
    }

    #[test]
    fn a_primary_that_stops_is_replaced_within_the_loss_of_signal_time() {
        let mut f = Failover::new(2, Settings::default());
        // The primary stops at 1 s.
        let (out, switches) = run(&mut f, 2000, |i, t| i == 1 || t < 1000);
        assert_eq!(switches.len(), 1);
        let s = switches[0];
        assert_eq!((s.from, s.to, s.why), (0, 1, Why::LossOfSignal));
        // The last packet of the primary came at 999 ms; the backup is
        // taken 200 ms later.
        assert_eq!(s.at_ns, 1199 * MS);
        // Every millisecond has one packet forwarded but the gap.
        let gap: Vec<u64> = (0..2000).filter(|t| !out.iter().any(|(o, _)| o == t)).collect();
        assert_eq!(gap, (1000..1199).collect::<Vec<_>>());
    }

    #[test]
    fn when_the_stream_ends_on_every_input_nothing_switches_and_nothing_is_waited_for() {
        let mut f = Failover::new(2, Settings::default());
        // Both paths carry the stream, the backup 20 ms behind; both end.
        let mut t = 0;
        while t <= 1000 * MS {
            f.packet(0, t);
            f.packet(1, t + 20 * MS);
            t += MS;
        }
        let los = f.deadline().expect("the primary's loss of signal");
        assert_eq!(f.tick(los), None, "the backup ended too: no switch");
        assert_eq!(f.deadline(), None, "a deadline seen to is not waited for again");
        // A backup that goes on is taken at its next packet.
        assert!(
            f.packet(1, los + MS)
                .1
                .is_some_and(|s| s.to == 1 && s.why == Why::LossOfSignal)
        );
    }

    #[test]
    fn a_backup_whose_packet_comes_first_does_not_take_the_stream_from_the_primary() {
        let mut f = Failover::new(2, Settings::default());
        assert_eq!(f.packet(1, 0), (false, None));
        assert_eq!(f.packet(0, 5 * MS), (true, None));
        assert_eq!(f.switches(), 0);
        // A primary that never comes is left after the loss-of-signal time.
        let mut f = Failover::new(2, Settings::default());
        for t in 0..300 {
            let (forward, s) = f.packet(1, t * MS);
            assert_eq!(forward, t >= 200, "at {t} ms");
            assert_eq!(s.is_some(), t == 200, "at {t} ms");
        }
    }

    #[test]
    fn the_primary_is_taken_back_only_after_the_hold_time() {
        let settings = Settings {
            hold_ns: 2000 * MS,
            ..Settings::default()
        };
        let mut f = Failover::new(2, settings);
        // The primary is away from 1 s to 3 s.
        let (_, switches) = run(&mut f, 8000, |i, t| i == 1 || !(1000..3000).contains(&t));
        let at: Vec<(usize, u64, Why)> = switches.iter().map(|s| (s.to, s.at_ns / MS, s.why)).collect();
        assert_eq!(at, [(1, 1199, Why::LossOfSignal), (0, 5000, Why::PrimaryBack)]);
    }

    #[test]
    fn a_primary_that_comes_and_goes_does_not_make_the_output_flap() {
        let settings = Settings {
            hold_ns: 2000 * MS,
            ..Settings::default()
        };
        let mut f = Failover::new(2, settings);
        // From 1 s the primary is there 300 ms, away 300 ms, and so on.
        let (_, switches) = run(&mut f, 10_000, |i, t| i == 1 || t < 1000 || (t / 300) % 2 == 0);
        assert_eq!(switches.len(), 1, "{switches:?}");
        // 100 ms on/off is shorter than the loss of signal: no switch at all.
        let mut f = Failover::new(2, settings);
        let (_, switches) = run(&mut f, 10_000, |i, t| i == 1 || (t / 100) % 2 == 0);
        assert!(switches.is_empty(), "{switches:?}");
    }

    #[test]
    fn errors_past_the_threshold_move_the_stream_and_a_forced_input_stays() {
        let settings = Settings {
            error_threshold: Some(10),
            hold_ns: 1000 * MS,
            ..Settings::default()
        };
        let mut f = Failover::new(2, settings);
        f.packet(0, 0);
        f.packet(1, 0);
        assert_eq!(f.errors(0, 5, MS), None);
        let s = f.errors(0, 6, 2 * MS).expect("switch");
        assert_eq!((s.to, s.why), (1, Why::Errors));
        // Forced back to the primary, it stays there whatever happens.
        let s = f.force(Some(0), 3 * MS).expect("switch");
        assert_eq!((s.to, s.why), (0, Why::Forced));
        assert_eq!(f.tick(500 * MS), None);
        assert_eq!(f.active(), 0);
        // Given back: the primary has no signal any more, the backup has.
        f.packet(1, 600 * MS);
        let s = f.force(None, 600 * MS).expect("switch");
        assert_eq!((s.to, s.why), (1, Why::LossOfSignal));
        assert_eq!(f.switches(), 3);
    }

    proptest! {
        /// Any on/off pattern of two inputs (in 50 ms steps): a switch away
        /// happens only from an input without signal, to one with it; a
        /// switch back only after the primary had the hold time without a
        /// break; and no input without signal stays active past the
        /// loss-of-signal time while the other brought a packet within
        /// half of it.
        #[test]
        fn switches_follow_the_rules(pattern in proptest::collection::vec(any::<(bool, bool)>(), 1..80)) {
            let settings = Settings { hold_ns: 500 * MS, ..Settings::default() };
            let mut f = Failover::new(2, settings);
            let on = |i: usize, t: u64| {
                let p = pattern[(t / 50) as usize % pattern.len()];
                if i == 0 { p.0 } else { p.1 }
            };
            let mut last = [None::<u64>; 2];
            let mut born = None::<u64>;
            let mut since = [None::<u64>; 2];
            for t in 0..(pattern.len() as u64 * 50) {
                let now = t * MS;
                // What the inputs had brought before this millisecond.
                let before = last;
                let signal_before = |i: usize| before[i].is_some_and(|l| now - l < settings.loss_of_signal_ns);
                for i in 0..2 {
                    if on(i, t) {
                        if last[i].is_none_or(|l: u64| now - l >= settings.loss_of_signal_ns) {
                            since[i] = Some(now);
                        }
                        last[i] = Some(now);
                    }
                }
                let signal = |i: usize| last[i].is_some_and(|l| now - l < settings.loss_of_signal_ns);
                let mut switches: Vec<Switch> = f.tick(now).into_iter().collect();
                for i in 0..2 {
                    if on(i, t) {
                        switches.extend(f.packet(i, now).1);
                    }
                }
                for s in switches {
                    prop_assert!(signal(s.to), "switched to {} without signal at {}", s.to, t);
                    match s.why {
                        Why::LossOfSignal => prop_assert!(!signal_before(s.from)),
                        Why::PrimaryBack => prop_assert!(since[0].is_some_and(|x| now - x >= settings.hold_ns)),
                        other => prop_assert!(false, "{:?}", other),
                    }
                }
                let recent = |i: usize| last[i].is_some_and(|l| now - l < settings.loss_of_signal_ns / 2);
                if on(0, t) || on(1, t) {
                    born.get_or_insert(now);
                }
                let a = f.active();
                // The primary has the loss-of-signal time from the first
                // packet of any input to bring its own.
                let awaited = last[a].is_none() && born.is_some_and(|b| now - b < settings.loss_of_signal_ns);
                prop_assert!(signal(a) || awaited || !recent(1 - a), "input {} has no signal at {} ms and stays", a, t);
            }
        }
    }
}
