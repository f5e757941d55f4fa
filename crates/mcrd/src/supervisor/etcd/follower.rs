//! The follower's loop: read the prefix whole, watch it, and start over
//! (at the next endpoint, after a backoff once every endpoint has failed)
//! whenever that breaks.

use std::time::Duration;

use mcr_core::control::StoreProblem;
use tokio::time::Instant;

use super::auth::explain;
use super::client::{CallError, Link, Unary, timed_out};
use super::endpoint::Endpoint;
use super::stream::WatchStream;
use super::wire::{EventKind, KeyValue, RangeRequest, WatchCreate, WatchRequest, WatchResponse};
use super::{Kvs, StoreUpdate};

/// Keys read per range call: a page of 300-byte values is about 100 KB of
/// JSON.
pub const PAGE_KEYS: i64 = 256;
/// The first pause after every endpoint has failed.
pub const BACKOFF_FIRST: Duration = Duration::from_millis(100);
/// The longest pause between attempts.
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// How often a read of the whole prefix is started again when compaction
/// removes the revision it reads at, before it counts as a failure.
const RANGE_ATTEMPTS: usize = 5;

/// What the loop needs, checked.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The members, tried in turn.
    pub endpoints: Vec<Endpoint>,
    /// The prefix, as bytes.
    pub prefix: Vec<u8>,
    /// Where ranges of the prefix start.
    pub start: Vec<u8>,
    /// Where they end.
    pub end: Vec<u8>,
    /// The time each call has.
    pub timeout: Duration,
    /// How long a watch may be silent before the member is asked whether
    /// it still answers. With a user, the member is asked this often even
    /// while changes come: an open watch goes on after the user's role is
    /// revoked, and only a call of the relay's own learns of it.
    pub probe_after: Duration,
    /// TLS and the user.
    pub link: Link,
}

impl Plan {
    /// What `e` means to an operator (see [`explain`]).
    fn explain(&self, e: CallError) -> CallError {
        explain(
            e,
            self.link.tls.as_ref(),
            self.link.credentials.as_ref(),
            &String::from_utf8_lossy(&self.prefix),
        )
    }
}

/// Follows the prefix forever, handing `deliver` what it learns.
pub async fn run(plan: Plan, deliver: &mut impl FnMut(StoreUpdate)) {
    let n = plan.endpoints.len();
    let mut next = 0;
    // This outage's reasons, one per endpoint tried since the last good
    // session; reported once all have been tried.
    let mut reasons: Vec<String> = Vec::new();
    let mut kinds: Vec<StoreProblem> = Vec::new();
    let mut reported: Option<String> = None;
    let mut pause = BACKOFF_FIRST;
    loop {
        let endpoint = &plan.endpoints[next];
        let mut progress = Progress::default();
        let failure = plan.explain(session(&plan, endpoint, deliver, &mut progress).await);
        let why = failure.to_string();
        if progress.delivered_whole {
            // The receiver saw etcd back: a new outage is reported anew.
            reported = None;
            reasons.clear();
            kinds.clear();
        }
        if progress.watching {
            pause = BACKOFF_FIRST;
        }
        // Logged as a warning once an outage: when it begins and when its
        // reasons change.
        if reasons.is_empty() && reported.is_none() {
            tracing::warn!("etcd: {why}");
        } else {
            tracing::debug!("etcd: {why}");
        }
        reasons.push(why);
        kinds.push(failure.problem());
        next = (next + 1) % n;
        if reasons.len() >= n {
            let why = reasons.join("; ");
            if reported.as_deref() != Some(why.as_str()) {
                let kind = outage_kind(&kinds);
                tracing::warn!("etcd: no endpoint answers ({why}); trying again");
                deliver(StoreUpdate::Unreachable { why: why.clone(), kind });
                reported = Some(why);
            }
            reasons.clear();
            kinds.clear();
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(BACKOFF_MAX);
        }
    }
}

/// What an outage is, from what each endpoint said: the refusal an operator
/// must mend first, when one refused (a certificate, then the user, then
/// its permission), else unreachable.
fn outage_kind(kinds: &[StoreProblem]) -> StoreProblem {
    [
        StoreProblem::Certificate,
        StoreProblem::Authentication,
        StoreProblem::Permission,
    ]
    .into_iter()
    .find(|k| kinds.contains(k))
    .unwrap_or(StoreProblem::Unreachable)
}

/// How far a session got.
#[derive(Debug, Default)]
struct Progress {
    /// It delivered a whole prefix.
    delivered_whole: bool,
    /// A watch of it was running.
    watching: bool,
}

/// How a watch ended.
enum WatchEnd {
    /// Compaction removed revisions the watch had yet to send: read whole.
    Compacted(i64),
    /// It broke; why.
    Failed(CallError),
}

/// Reads the prefix whole and watches it at one endpoint, again after each
/// compaction, until something fails; returns why.
async fn session(
    plan: &Plan,
    endpoint: &Endpoint,
    deliver: &mut impl FnMut(StoreUpdate),
    progress: &mut Progress,
) -> CallError {
    let mut unary = Unary::new(endpoint.clone(), plan.timeout, &plan.link);
    loop {
        let (revision, kvs) = match read_whole(plan, &mut unary).await {
            Ok(whole) => whole,
            Err(e) => return e,
        };
        tracing::info!(
            "etcd: {}: {} keys under {:?} at revision {revision}",
            endpoint.url,
            kvs.len(),
            String::from_utf8_lossy(&plan.prefix)
        );
        deliver(StoreUpdate::Whole { revision, kvs });
        progress.delivered_whole = true;
        match watch(plan, endpoint, &mut unary, revision, deliver, progress).await {
            WatchEnd::Compacted(oldest) => {
                tracing::info!(
                    "etcd: {}: the watch fell behind compaction (oldest revision {oldest}); reading the prefix again",
                    endpoint.url
                );
            }
            WatchEnd::Failed(why) => return why,
        }
    }
}

/// The prefix's keys at one revision, page by page.
async fn read_whole(plan: &Plan, unary: &mut Unary) -> Result<(i64, Kvs), CallError> {
    let mut attempt = 0;
    'again: loop {
        attempt += 1;
        let mut kvs = Vec::new();
        let mut key = plan.start.clone();
        // 0 (the current revision) for the first page; the first page's
        // revision for the others, so all pages are of one moment.
        let mut revision = 0;
        loop {
            let request = RangeRequest {
                key: &key,
                range_end: &plan.end,
                limit: PAGE_KEYS,
                revision,
                count_only: false,
            };
            let page = match unary.range(&request, "range").await {
                Err(e) if revision != 0 && e.is_compacted() && attempt < RANGE_ATTEMPTS => continue 'again,
                page => page?,
            };
            if revision == 0 {
                revision = page.header.revision;
            }
            let more = page.more;
            match page.kvs.last() {
                // The next page starts just after the last key.
                Some(last) => key = [last.key.as_slice(), &[0]].concat(),
                None => return Ok((revision, kvs)),
            }
            kvs.extend(page.kvs.into_iter().filter_map(|kv| entry(&plan.prefix, kv)));
            if !more {
                return Ok((revision, kvs));
            }
        }
    }
}

/// Watches the prefix from `revision + 1`, delivering each response's
/// changes as one batch.
async fn watch(
    plan: &Plan,
    endpoint: &Endpoint,
    unary: &mut Unary,
    revision: i64,
    deliver: &mut impl FnMut(StoreUpdate),
    progress: &mut Progress,
) -> WatchEnd {
    let request = WatchRequest {
        create_request: WatchCreate {
            key: &plan.start,
            range_end: &plan.end,
            start_revision: revision + 1,
            progress_notify: true,
        },
    };
    // A token etcd refuses at the watch's creation (it expired since the
    // read) is got again, once.
    let mut renewed = false;
    let (mut stream, first) = loop {
        let token = match unary.token().await {
            Ok(t) => t,
            Err(e) => return WatchEnd::Failed(e),
        };
        let open = async {
            let mut stream = WatchStream::open(endpoint, plan.link.tls.as_ref(), token.as_deref(), &request).await?;
            let first = stream.next().await?;
            Ok::<_, CallError>((stream, first))
        };
        let opened = match tokio::time::timeout(plan.timeout, open).await {
            Ok(Ok(opened)) => opened,
            Ok(Err(e)) => return WatchEnd::Failed(e),
            Err(_) => return WatchEnd::Failed(timed_out(endpoint, "watch", plan.timeout)),
        };
        let refused = canceled(endpoint, &opened.1).filter(|e| token.is_some() && e.refuses_token());
        match refused {
            Some(e) if !renewed => {
                renewed = true;
                if let Err(e) = unary.renew(&e).await {
                    return WatchEnd::Failed(e);
                }
            }
            _ => break opened,
        }
    };
    // With a user, the member is asked on a schedule, changes or not.
    let scheduled = plan.link.credentials.is_some();
    let mut probe_at = Instant::now() + plan.probe_after;
    let mut response = first;
    loop {
        if response.canceled {
            return match response.compact_revision {
                0 => WatchEnd::Failed(canceled(endpoint, &response).expect("canceled")),
                oldest => WatchEnd::Compacted(oldest),
            };
        }
        if response.created {
            progress.watching = true;
        } else if let Some(update) = changes(&plan.prefix, response) {
            deliver(update);
        }
        if !scheduled {
            probe_at = Instant::now() + plan.probe_after;
        }
        response = loop {
            match tokio::time::timeout_at(probe_at, stream.next()).await {
                Ok(Ok(r)) => break r,
                Ok(Err(e)) => return WatchEnd::Failed(e),
                // Silent for a while (or, with a user, time to ask): is
                // the member still there, and may the user still read?
                Err(_) => {
                    probe_at = Instant::now() + plan.probe_after;
                    match probe(plan, unary).await {
                        Ok(()) => {}
                        // etcd answered, and refused.
                        Err(e @ (CallError::Etcd { .. } | CallError::Denied { .. } | CallError::Status { .. })) => {
                            return WatchEnd::Failed(e);
                        }
                        Err(e) => return WatchEnd::Failed(CallError::Silent(Box::new(e))),
                    }
                }
            }
        };
    }
}

/// The error of a watch etcd canceled, or `None` if it did not.
fn canceled(endpoint: &Endpoint, response: &WatchResponse) -> Option<CallError> {
    (response.canceled && response.compact_revision == 0).then(|| CallError::Canceled {
        endpoint: endpoint.url.clone(),
        reason: response.cancel_reason.clone(),
    })
}

/// A linearizable count of one key: answered only by a member that is
/// alive and part of a cluster with a leader.
async fn probe(plan: &Plan, unary: &mut Unary) -> Result<(), CallError> {
    let request = RangeRequest {
        key: &plan.start,
        range_end: &[],
        limit: 0,
        revision: 0,
        count_only: true,
    };
    unary.range(&request, "liveness probe").await.map(|_| ())
}

/// The changes of one watch response, or `None` when it has none (a
/// progress notification, or only keys that are skipped).
fn changes(prefix: &[u8], response: WatchResponse) -> Option<StoreUpdate> {
    let revision = response.events.iter().map(|e| e.kv.mod_revision).max()?;
    let changes: Vec<_> = response
        .events
        .into_iter()
        .filter_map(|e| {
            let kind = e.kind;
            entry(prefix, e.kv).map(|(key, value)| (key, (kind == EventKind::Put).then_some(value)))
        })
        .collect();
    (!changes.is_empty()).then_some(StoreUpdate::Changes { revision, changes })
}

/// A key-value as delivered: the key without the prefix. A key outside the
/// prefix (etcd never sends one) or not UTF-8 is skipped.
fn entry(prefix: &[u8], kv: KeyValue) -> Option<(String, Vec<u8>)> {
    let Some(suffix) = kv.key.strip_prefix(prefix) else {
        tracing::warn!(
            "etcd: skipped key {:?}: outside the prefix {:?}",
            String::from_utf8_lossy(&kv.key),
            String::from_utf8_lossy(prefix)
        );
        return None;
    };
    match String::from_utf8(suffix.to_vec()) {
        Ok(key) => Some((key, kv.value)),
        Err(_) => {
            tracing::warn!("etcd: skipped key {}: not UTF-8", kv.key.escape_ascii());
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::supervisor::etcd::wire::{Event, Header};

    fn kv(key: &[u8], value: &[u8], rev: i64) -> KeyValue {
        KeyValue {
            key: key.to_vec(),
            value: value.to_vec(),
            mod_revision: rev,
        }
    }

    #[test]
    fn an_entry_is_the_key_after_the_prefix() {
        assert_eq!(
            entry(b"/mcr/", kv(b"/mcr/a/b", b"v", 1)),
            Some(("a/b".into(), b"v".to_vec()))
        );
        assert_eq!(entry(b"/mcr/", kv(b"/mcs/a", b"v", 1)), None);
        assert_eq!(entry(b"/mcr/", kv(b"/mcr/\xff", b"v", 1)), None);
        assert_eq!(entry(b"", kv(b"x", b"", 1)), Some(("x".into(), vec![])));
    }

    #[test]
    fn a_response_is_one_batch_in_order() {
        let response = WatchResponse {
            header: Header { revision: 9 },
            events: vec![
                Event {
                    kind: EventKind::Put,
                    kv: kv(b"/p/a", b"1", 7),
                },
                Event {
                    kind: EventKind::Delete,
                    kv: kv(b"/p/b", b"", 8),
                },
                Event {
                    kind: EventKind::Put,
                    kv: kv(b"/p/\xfe", b"1", 8),
                },
            ],
            ..WatchResponse::default()
        };
        match changes(b"/p/", response) {
            Some(StoreUpdate::Changes { revision, changes }) => {
                assert_eq!(revision, 8);
                assert_eq!(
                    changes,
                    [("a".to_string(), Some(b"1".to_vec())), ("b".to_string(), None)]
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_progress_notification_or_only_skipped_keys_deliver_nothing() {
        assert!(changes(b"/p/", WatchResponse::default()).is_none());
        let skipped = WatchResponse {
            events: vec![Event {
                kind: EventKind::Put,
                kv: kv(b"/p/\xfe", b"1", 8),
            }],
            ..WatchResponse::default()
        };
        assert!(changes(b"/p/", skipped).is_none());
    }
}
