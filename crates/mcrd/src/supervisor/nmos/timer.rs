//! The timer of a scheduled IS-05 activation: it wakes the supervisor's
//! loop at the activation's time, to within tens of microseconds on a busy
//! machine.

/// How early tokio's timer wakes a scheduled activation: its wheel has
/// about 1 ms steps, and on a busy machine the loop it runs on can wake
/// several ms late; the wait ends with a precise sleep.
const TIMER_MARGIN_NS: u64 = 20_000_000;

/// The longest the supervisor's loop stays in the real-time class for an
/// activation.
const PROMPT_AT_MOST: std::time::Duration = std::time::Duration::from_millis(5);

/// Runs `then` when the monotonic clock reaches `deadline_ns`, to within
/// tens of microseconds even on a busy machine: tokio's timer until [`TIMER_MARGIN_NS`] before, then a
/// sleep on the monotonic clock on a blocking thread in the real-time
/// class (which wakes ahead of ordinary threads), which at its time puts
/// `loop_thread` (the supervisor's, which `then` wakes to make the
/// activation) in that class too; the loop goes back to the ordinary class
/// once it has taken the activation up. IS-05 asks for an activation at
/// its time; tokio's timer alone came 1 to 3.5 ms late, and ordinary
/// threads alone up to 4 ms with both cores busy.
pub async fn at_its_time(deadline_ns: u64, loop_thread: i32, then: impl FnOnce() + Send + 'static) {
    let wait_ns = deadline_ns.saturating_sub(mcr_sys::clock::monotonic_ns());
    if let Some(early) = wait_ns.checked_sub(TIMER_MARGIN_NS) {
        tokio::time::sleep(std::time::Duration::from_nanos(early)).await;
    }
    let waited = tokio::task::spawn_blocking(move || {
        // The default slack (50 µs) would let the kernel wake it later;
        // this thread of the blocking pool only sleeps and reads files.
        let _ = mcr_sys::clock::set_timer_slack_ns(1_000);
        let prompt = match mcr_sys::process::set_prompt(0, true) {
            Ok(()) => true,
            Err(e) => {
                static TOLD: std::sync::Once = std::sync::Once::new();
                TOLD.call_once(|| {
                    tracing::warn!(
                        "NMOS: scheduled activations wake at ordinary priority, later on a busy machine: {e} (give mcrd CAP_SYS_NICE, or LimitRTPRIO=1 with --user)"
                    );
                });
                false
            }
        };
        mcr_sys::clock::sleep_until_ns(deadline_ns);
        if prompt {
            let _ = mcr_sys::process::set_prompt(loop_thread, true);
        }
        then();
        if prompt {
            // Back to the pool as it came.
            let _ = mcr_sys::process::set_prompt(0, false);
            // The loop goes back itself once it has taken the activation
            // up; should it be in the middle of something long (a reload
            // of 10,000 rules), it goes back at most this long from now,
            // so that it never holds ordinary threads (the workers) off a
            // CPU for longer.
            std::thread::sleep(PROMPT_AT_MOST);
            let _ = mcr_sys::process::set_prompt(loop_thread, false);
        }
    })
    .await;
    if let Err(e) = waited {
        tracing::warn!("NMOS: a scheduled activation's timer failed: {e}");
    }
}
