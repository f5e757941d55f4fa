use super::*;

const MS: u64 = 1_000_000;

/// A MoldUDP64 packet of `session` (padded to 10 bytes), `seq` and
/// `count` messages.
fn mold(session: &str, seq: u64, count: u16) -> Vec<u8> {
    let mut p = format!("{session:<10}").into_bytes();
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&count.to_be_bytes());
    for _ in 0..count.min(100) {
        p.extend_from_slice(&[0, 1, b'X']);
    }
    p
}

fn mdp3(seq: u32) -> Vec<u8> {
    let mut p = seq.to_le_bytes().to_vec();
    p.extend_from_slice(&[0; 8]);
    p.extend_from_slice(b"msg");
    p
}

fn pitch(unit: u8, seq: u32, count: u8) -> Vec<u8> {
    let mut p = 12u16.to_le_bytes().to_vec();
    p.extend_from_slice(&[count, unit]);
    p.extend_from_slice(&seq.to_le_bytes());
    p.extend_from_slice(&[1, 2, 3, 4]);
    p
}

/// A deterministic coin: true for about `percent` of `(seed, i)`.
fn lost(seed: u64, i: u64, percent: u64) -> bool {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ i.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 31;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 29;
    x % 100 < percent
}

#[test]
fn every_sequence_number_one_line_brought_goes_out_once_and_the_rest_are_counted_lost() {
    for (framing, per) in [(Framing::MoldUdp64, 3u64), (Framing::Mdp3, 1)] {
        let mut a = Arbiter::new(framing, DEFAULT_WINDOW, 2);
        let mut out = Vec::new();
        let (mut both, mut lost_a, mut lost_b) = (0, 0, 0);
        let packet = |k: u64| match framing {
            Framing::MoldUdp64 => mold("S1", 1 + k * per, per as u16),
            _ => mdp3(1 + k as u32),
        };
        // B lags A by 3 packets (3 ms); each loses about 5 %, on its own.
        let n = 5_000u64;
        // Neither loses the first or the last packet, so every gap is
        // seen from both sides.
        let lost = |seed, k| k > 0 && k + 1 < n && lost(seed, k, 5);
        for t in 0..n + 3 {
            if t < n {
                if lost(1, t) {
                    lost_a += 1;
                } else if a.packet(0, &packet(t), t * MS) == Verdict::Forward {
                    out.push(t);
                }
            }
            if let Some(k) = t.checked_sub(3).filter(|k| *k < n) {
                let (la, lb) = (lost(1, k), lost(2, k));
                if lb {
                    lost_b += 1;
                    both += u64::from(la);
                } else if a.packet(1, &packet(k), t * MS) == Verdict::Forward {
                    out.push(k);
                }
            }
        }
        // Every number once; what is missing is what both lines lost.
        let mut sorted = out.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), out.len(), "{framing}: a duplicate went out");
        let missing: Vec<u64> = (0..n).filter(|k| sorted.binary_search(k).is_err()).collect();
        assert!(missing.iter().all(|&k| lost(1, k) && lost(2, k)));
        assert_eq!(missing.len() as u64, both);
        assert!(both > 0, "the seeds make both lines lose some");
        assert_eq!(a.lost(), both * per, "{framing}");
        let c = a.counts();
        assert_eq!(c[0].gaps, lost_a * per);
        assert_eq!(c[1].gaps, lost_b * per);
        assert_eq!(c[0].forwarded + c[1].forwarded, n - both);
        assert_eq!(c[0].copies + c[1].copies, (n - lost_a) + (n - lost_b) - (n - both));
        assert_eq!(c[0].messages, (n - lost_a) * per);
        // B's copies came 3 ms after A's.
        let lags = a.lags(n * MS);
        assert!(lags[1].samples > 4_000, "{lags:?}");
        assert!((2_500_000..=3_500_000).contains(&lags[1].p50_ns), "{lags:?}");
        // A, ahead, never came second.
        assert_eq!(lags[0].samples, 0, "{lags:?}");
    }
}

#[test]
fn heartbeats_go_out_once_and_tell_a_gap_at_the_end() {
    let mut a = Arbiter::new(Framing::MoldUdp64, DEFAULT_WINDOW, 2);
    assert_eq!(a.packet(0, &mold("S", 1, 2), 0), Verdict::Forward);
    assert_eq!(a.packet(1, &mold("S", 1, 2), MS), Verdict::Copy);
    // Both lose 3..=4; A's heartbeat says the next is 5.
    assert_eq!(a.packet(0, &mold("S", 5, 0), 2 * MS), Verdict::Forward);
    assert_eq!(a.packet(1, &mold("S", 5, 0), 3 * MS), Verdict::Copy);
    assert_eq!(a.lost(), 2);
    assert_eq!((a.counts()[0].gaps, a.counts()[0].heartbeats), (2, 1));
    // A second later the same heartbeat goes out again (the feed is idle).
    assert_eq!(a.packet(0, &mold("S", 5, 0), 1_100 * MS), Verdict::Forward);
    // The end of the session, once.
    assert_eq!(a.packet(0, &mold("S", 5, 0xffff), 1_200 * MS), Verdict::Forward);
    assert_eq!(a.packet(1, &mold("S", 5, 0xffff), 1_201 * MS), Verdict::Copy);
}

#[test]
fn a_new_session_starts_afresh_and_a_lone_packet_of_another_session_is_dropped() {
    let mut a = Arbiter::new(Framing::MoldUdp64, DEFAULT_WINDOW, 2);
    for s in 1..=50u64 {
        assert_eq!(a.packet(0, &mold("DAY1", s, 1), s * MS), Verdict::Forward);
    }
    // A lone packet of another session, mid-sequence: dropped, counted.
    assert_eq!(a.packet(0, &mold("BOGUS", 900, 1), 51 * MS), Verdict::WrongSession);
    assert_eq!(a.packet(0, &mold("DAY1", 51, 1), 52 * MS), Verdict::Forward);
    // B lags: it is still at 40..=51 of DAY1.
    for s in 40..=51u64 {
        assert_eq!(a.packet(1, &mold("DAY1", s, 1), 53 * MS), Verdict::Copy);
    }
    // A starts DAY2 at 1: at once, numbers that DAY1 had are new.
    for s in 1..=10u64 {
        assert_eq!(a.packet(0, &mold("DAY2", s, 1), (60 + s) * MS), Verdict::Forward, "{s}");
    }
    // B brings the end of DAY1 that A lost (52, 53), then joins DAY2.
    assert_eq!(a.packet(1, &mold("DAY1", 52, 1), 71 * MS), Verdict::Forward);
    assert_eq!(a.packet(1, &mold("DAY1", 53, 1), 71 * MS), Verdict::Forward);
    for s in 1..=10u64 {
        assert_eq!(a.packet(1, &mold("DAY2", s, 1), 72 * MS), Verdict::Copy, "{s}");
    }
    assert_eq!(a.packet(1, &mold("DAY2", 11, 1), 73 * MS), Verdict::Forward);
    let c = a.counts();
    assert_eq!((c[0].wrong_session, c[0].resets, c[1].resets), (1, 1, 1));
    // A skipped 52 and 53 of DAY1; B brought them.
    assert_eq!(a.lost(), 0);
    // A session change that is not at 1 waits for the next packet.
    assert_eq!(a.packet(0, &mold("DAY3", 500, 1), 80 * MS), Verdict::WrongSession);
    assert_eq!(a.packet(0, &mold("DAY3", 501, 1), 81 * MS), Verdict::Forward);
    // B follows A into DAY3 at once, and brings the 500 A dropped.
    assert_eq!(a.packet(1, &mold("DAY3", 500, 1), 82 * MS), Verdict::Forward);
    assert_eq!(a.packet(1, &mold("DAY3", 501, 1), 83 * MS), Verdict::Copy);
    // A lone packet of yet another session on B is still refused.
    assert_eq!(a.packet(1, &mold("DAY4", 9, 1), 84 * MS), Verdict::WrongSession);
}

#[test]
fn a_reset_to_one_starts_afresh_at_once_and_a_far_jump_back_once_confirmed() {
    let mut a = Arbiter::new(Framing::Mdp3, WINDOW_MIN, 2);
    for s in 1..=3_000u32 {
        assert_eq!(a.packet(0, &mdp3(s), 0), Verdict::Forward);
        assert_eq!(a.packet(1, &mdp3(s), 0), Verdict::Copy);
    }
    // CME's weekly reset: back to 1, on A then on B.
    for s in 1..=5u32 {
        assert_eq!(a.packet(0, &mdp3(s), MS), Verdict::Forward, "{s}");
    }
    for s in 1..=5u32 {
        assert_eq!(a.packet(1, &mdp3(s), MS), Verdict::Copy, "{s}");
    }
    // A jump back to 100: the first is a stray, its successor confirms;
    // B, behind, follows A at once (and brings the 100 A dropped).
    for s in 6..=2_000u32 {
        a.packet(0, &mdp3(s), 2 * MS);
        a.packet(1, &mdp3(s), 2 * MS);
    }
    assert_eq!(a.packet(0, &mdp3(100), 3 * MS), Verdict::Stray);
    assert_eq!(a.packet(0, &mdp3(101), 3 * MS), Verdict::Forward);
    assert_eq!(a.packet(1, &mdp3(100), 3 * MS), Verdict::Forward);
    assert_eq!(a.packet(1, &mdp3(101), 3 * MS), Verdict::Copy);
    assert_eq!(a.packet(1, &mdp3(102), 3 * MS), Verdict::Forward);
    assert_eq!(a.packet(0, &mdp3(102), 3 * MS), Verdict::Copy);
    let c = a.counts();
    assert_eq!((c[0].resets, c[1].resets, c[0].strays, c[1].strays), (2, 2, 1, 0));
}

#[test]
fn a_line_that_lost_the_reset_packet_follows_the_other_or_its_own_next_packet() {
    let mut a = Arbiter::new(Framing::Mdp3, DEFAULT_WINDOW, 2);
    for s in 1..=1_000u32 {
        a.packet(0, &mdp3(s), 0);
        a.packet(1, &mdp3(s), 0);
    }
    // A loses the reset's 1: its 2 is a stray, its 3 confirms.
    assert_eq!(a.packet(0, &mdp3(2), MS), Verdict::Stray);
    assert_eq!(a.packet(0, &mdp3(3), MS), Verdict::Forward);
    // B, behind, brings 1 (a reset at once) and 2, which A dropped.
    assert_eq!(a.packet(1, &mdp3(1), 2 * MS), Verdict::Forward);
    assert_eq!(a.packet(1, &mdp3(2), 2 * MS), Verdict::Forward);
    assert_eq!(a.packet(1, &mdp3(3), 2 * MS), Verdict::Copy);
    // Next week B loses 1 and 2: A was reset, so B's 3 joins at once.
    for s in 4..=1_000u32 {
        a.packet(0, &mdp3(s), 3 * MS);
        a.packet(1, &mdp3(s), 3 * MS);
    }
    assert_eq!(a.packet(0, &mdp3(1), 4 * MS), Verdict::Forward);
    assert_eq!(a.packet(0, &mdp3(2), 4 * MS), Verdict::Forward);
    assert_eq!(a.packet(0, &mdp3(3), 4 * MS), Verdict::Forward);
    assert_eq!(a.packet(1, &mdp3(3), 5 * MS), Verdict::Copy);
    assert_eq!(a.packet(1, &mdp3(4), 5 * MS), Verdict::Forward);
    assert_eq!(a.lost(), 0);
}

#[test]
fn a_line_that_missed_two_resets_joins_the_newest() {
    let mut a = Arbiter::new(Framing::Mdp3, WINDOW_MIN, 2);
    for s in 1..=100u32 {
        a.packet(0, &mdp3(s), 0);
        a.packet(1, &mdp3(s), 0);
    }
    // B goes away; A resets twice.
    for _ in 0..2 {
        for s in 1..=100u32 {
            assert_eq!(a.packet(0, &mdp3(s), MS), Verdict::Forward);
        }
    }
    assert_eq!(a.packet(0, &mdp3(101), MS), Verdict::Forward);
    // B comes back at 1 of the newest: copies of what A brought, then it
    // fills what A loses.
    assert_eq!(a.packet(1, &mdp3(1), 2 * MS), Verdict::Copy);
    assert_eq!(a.packet(1, &mdp3(101), 2 * MS), Verdict::Copy);
    assert_eq!(a.packet(1, &mdp3(102), 2 * MS), Verdict::Forward);
    assert_eq!(a.packet(0, &mdp3(102), 2 * MS), Verdict::Copy);
}

#[test]
fn units_are_independent_and_malformed_packets_are_counted() {
    let mut a = Arbiter::new(Framing::Pitch, DEFAULT_WINDOW, 2);
    for s in 1..=20u32 {
        for unit in [1u8, 2] {
            assert_eq!(a.packet(0, &pitch(unit, s, 1), 0), Verdict::Forward);
            assert_eq!(a.packet(1, &pitch(unit, s, 1), 0), Verdict::Copy);
        }
    }
    let mut short = pitch(1, 21, 1);
    short.truncate(6);
    assert!(matches!(
        a.packet(0, &short, 0),
        Verdict::Malformed(Malformed::TooShort { need: 8 })
    ));
    let mut wrong_len = pitch(1, 21, 1);
    wrong_len.push(0);
    assert!(matches!(
        a.packet(1, &wrong_len, 0),
        Verdict::Malformed(Malformed::Length { says: 12 })
    ));
    assert_eq!((a.counts()[0].malformed, a.counts()[1].malformed), (1, 1));
    // A heartbeat of unit 2 goes out once.
    assert_eq!(a.packet(0, &pitch(2, 21, 0), MS), Verdict::Forward);
    assert_eq!(a.packet(1, &pitch(2, 21, 0), MS), Verdict::Copy);
}

#[test]
fn a_lone_packet_far_ahead_moves_nothing_and_a_real_jump_is_followed() {
    let mut a = Arbiter::new(Framing::Mdp3, WINDOW_MIN, 2);
    for s in 1..=100u32 {
        assert_eq!(a.packet(0, &mdp3(s), 0), Verdict::Forward);
        assert_eq!(a.packet(1, &mdp3(s), 0), Verdict::Copy);
    }
    // A corrupt number on B, far ahead: dropped, and B goes on as before
    // (no reset, so nothing goes out twice).
    assert_eq!(a.packet(1, &mdp3(2_000_000), MS), Verdict::Stray);
    for s in 101..=200u32 {
        assert_eq!(a.packet(0, &mdp3(s), 2 * MS), Verdict::Forward);
        assert_eq!(a.packet(1, &mdp3(s), 2 * MS), Verdict::Copy, "{s}");
    }
    // A line back after a long silence: its first packet far ahead waits
    // for its next.
    assert_eq!(a.packet(0, &mdp3(5_000), 3 * MS), Verdict::Stray);
    assert_eq!(a.packet(0, &mdp3(5_001), 3 * MS), Verdict::Forward);
    assert_eq!(a.packet(1, &mdp3(5_000), 3 * MS), Verdict::Stray);
    assert_eq!(a.packet(1, &mdp3(5_001), 3 * MS), Verdict::Copy);
    assert_eq!(a.counts()[0].resets + a.counts()[1].resets, 0);
}

#[test]
fn a_copy_a_window_behind_is_too_late() {
    let mut a = Arbiter::new(Framing::Mdp3, WINDOW_MIN, 2);
    for s in 1..=1_100u32 {
        a.packet(0, &mdp3(s), 0);
    }
    // B brings 50, 1,050 numbers late: its slot has 1,074.
    assert_eq!(a.packet(1, &mdp3(50), MS), Verdict::TooLate);
    // Its next, a window ahead of it, waits for its successor.
    assert_eq!(a.packet(1, &mdp3(1_090), MS), Verdict::Stray);
    assert_eq!(a.packet(1, &mdp3(1_091), MS), Verdict::Copy);
    assert_eq!(a.counts()[1].too_late, 1);
    assert_eq!(a.counts()[1].repeats, 0);
}
