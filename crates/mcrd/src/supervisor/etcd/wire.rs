//! The JSON that etcd's gRPC gateway (v3.4, `/v3/...`) takes and gives: the
//! protobuf messages of `etcdserverpb` in proto3's JSON mapping. Keys and
//! values are base64; 64-bit integers (revisions, counts) are strings; a
//! field at its default (0, false, empty, `PUT`) is left out.
//!
//! Only the fields the follower uses are declared; serde ignores the rest.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// `POST /v3/kv/range`: a `RangeRequest`.
#[derive(Debug, Serialize)]
pub struct RangeRequest<'a> {
    /// The first key.
    #[serde(serialize_with = "base64_out")]
    pub key: &'a [u8],
    /// One past the last key (`[0]`: every key from `key` on).
    #[serde(serialize_with = "base64_out")]
    pub range_end: &'a [u8],
    /// At most this many keys (0: no limit).
    #[serde(serialize_with = "int_out", skip_serializing_if = "is_zero")]
    pub limit: i64,
    /// The revision to read at (0: the current one).
    #[serde(serialize_with = "int_out", skip_serializing_if = "is_zero")]
    pub revision: i64,
    /// Only the number of keys, no keys.
    #[serde(skip_serializing_if = "is_false")]
    pub count_only: bool,
}

/// A `RangeResponse`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RangeResponse {
    /// The store's revision the range was read at.
    pub header: Header,
    /// The keys, in key order.
    pub kvs: Vec<KeyValue>,
    /// Whether keys past the limit remain.
    pub more: bool,
    /// How many keys the whole range holds.
    #[serde(deserialize_with = "int_in")]
    pub count: i64,
}

/// A `ResponseHeader`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Header {
    /// The store's revision when the response was made.
    #[serde(deserialize_with = "int_in")]
    pub revision: i64,
}

/// An `mvccpb.KeyValue`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct KeyValue {
    /// The key.
    #[serde(deserialize_with = "base64_in")]
    pub key: Vec<u8>,
    /// The value (absent when empty, and in a delete event).
    #[serde(deserialize_with = "base64_in")]
    pub value: Vec<u8>,
    /// The revision of the key's last change.
    #[serde(deserialize_with = "int_in")]
    pub mod_revision: i64,
}

/// `POST /v3/watch`: the one `WatchRequest` the follower sends.
#[derive(Debug, Serialize)]
pub struct WatchRequest<'a> {
    /// Opens a watch.
    pub create_request: WatchCreate<'a>,
}

/// A `WatchCreateRequest`.
#[derive(Debug, Serialize)]
pub struct WatchCreate<'a> {
    /// The first key.
    #[serde(serialize_with = "base64_out")]
    pub key: &'a [u8],
    /// One past the last key.
    #[serde(serialize_with = "base64_out")]
    pub range_end: &'a [u8],
    /// The first revision to send changes of.
    #[serde(serialize_with = "int_out")]
    pub start_revision: i64,
    /// Asks etcd for progress notifications (an empty response carrying
    /// the current revision) when the watch is idle, at the server's
    /// `--experimental-watch-progress-notify-interval` (10 min unless set).
    pub progress_notify: bool,
}

/// One line of the watch stream: a response, or the gateway's report of the
/// gRPC stream's failure.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct WatchLine {
    /// A `WatchResponse`.
    pub result: Option<WatchResponse>,
    /// The stream failed: `{"grpc_code":14,"http_code":503,"message":...}`.
    pub error: Option<serde_json::Value>,
}

/// A `WatchResponse`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct WatchResponse {
    /// For events: the store's revision when sent (not necessarily theirs).
    pub header: Header,
    /// The answer to the create request.
    pub created: bool,
    /// The watch has ended.
    pub canceled: bool,
    /// Set with `canceled` when the start revision has been compacted away:
    /// the oldest revision still there.
    #[serde(deserialize_with = "int_in")]
    pub compact_revision: i64,
    /// Why the watch was canceled, if etcd says.
    pub cancel_reason: String,
    /// The changes, in revision order.
    pub events: Vec<Event>,
}

/// An `mvccpb.Event`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Event {
    /// `PUT` (left out, the default) or `DELETE`.
    #[serde(rename = "type")]
    pub kind: EventKind,
    /// The key as changed (for a delete: key and `mod_revision` only).
    pub kv: KeyValue,
}

/// What an event did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum EventKind {
    /// The key was written.
    #[default]
    #[serde(rename = "PUT")]
    Put,
    /// The key was removed.
    #[serde(rename = "DELETE")]
    Delete,
}

/// `POST /v3/auth/authenticate`.
#[derive(Serialize)]
pub struct AuthenticateRequest<'a> {
    /// The user.
    pub name: &'a str,
    /// Its password.
    pub password: &'a str,
}

/// Its answer: the token to send in `Authorization`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct AuthenticateResponse {
    /// A simple token (`random.index`) or a JWT.
    pub token: String,
}

/// The body of a unary call's failure: `{"error":"...","message":"...","code":11}`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ErrorBody {
    /// etcd's message, e.g. `etcdserver: mvcc: required revision has been compacted`.
    pub message: String,
    /// The gRPC status code.
    pub code: i32,
}

/// The message in a watch stream's `error` member (an object with a
/// `message`, or a plain string).
pub fn stream_error_message(error: &serde_json::Value) -> String {
    match error {
        serde_json::Value::String(s) => s.clone(),
        v => v
            .get("message")
            .and_then(|m| m.as_str())
            .map_or_else(|| v.to_string(), str::to_string),
    }
}

/// The end of the range of every key starting with `prefix`: the prefix with
/// its last byte that is not 0xff incremented and what follows cut off, as
/// etcd's clients compute it; `[0]` (no end) when there is no such byte.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// The key `prefix` ranges start at: `[0]` for the empty prefix (etcd reads
/// an empty key as no key at all).
pub fn range_start(prefix: &[u8]) -> Vec<u8> {
    if prefix.is_empty() { vec![0] } else { prefix.to_vec() }
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn base64_out<S: Serializer>(bytes: &&[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&STANDARD.encode(bytes))
}

fn int_out<S: Serializer>(n: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&n.to_string())
}

fn base64_in<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    let s = String::deserialize(d)?;
    STANDARD.decode(s.as_bytes()).map_err(serde::de::Error::custom)
}

/// A 64-bit integer as the gateway writes it (a string), or as a number.
fn int_in<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Int {
        Text(String),
        Number(i64),
    }
    match Int::deserialize(d)? {
        Int::Number(n) => Ok(n),
        Int::Text(s) => s.parse().map_err(serde::de::Error::custom),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Responses as etcd 3.4.23's gateway sent them.
    const RANGE: &str = r#"{"header":{"cluster_id":"324952591200643719","member_id":"3319814642761637952","revision":"4","raft_term":"2"},"kvs":[{"key":"L21jci9h","create_revision":"2","mod_revision":"2","version":"1","value":"MQ=="}],"more":true,"count":"2"}"#;
    const EMPTY_RANGE: &str = r#"{"header":{"cluster_id":"324952591200643719","member_id":"3319814642761637952","revision":"4","raft_term":"2"}}"#;
    const CREATED: &str = r#"{"result":{"header":{"cluster_id":"324952591200643719","member_id":"3319814642761637952","revision":"8","raft_term":"2"},"created":true}}"#;
    const EVENTS: &str = r#"{"result":{"header":{"cluster_id":"324952591200643719","member_id":"3319814642761637952","revision":"7","raft_term":"2"},"events":[{"kv":{"key":"L21jci9j","create_revision":"5","mod_revision":"5","version":"1"}},{"type":"DELETE","kv":{"key":"L21jci9h","mod_revision":"6"}},{"kv":{"key":"L21jci90MQ==","create_revision":"7","mod_revision":"7","version":"1","value":"eA=="}}]}}"#;
    const COMPACTED: &str = r#"{"result":{"header":{"cluster_id":"324952591200643719","member_id":"3319814642761637952","raft_term":"2"},"canceled":true,"compact_revision":"8"}}"#;
    const FAILED: &str = r#"{"error":"etcdserver: mvcc: required revision has been compacted","message":"etcdserver: mvcc: required revision has been compacted","code":11}"#;

    #[test]
    fn reads_a_range_page() {
        let r: RangeResponse = serde_json::from_str(RANGE).expect("parse");
        assert_eq!(r.header.revision, 4);
        assert!(r.more);
        assert_eq!(r.count, 2);
        assert_eq!(r.kvs.len(), 1);
        assert_eq!(r.kvs[0].key, b"/mcr/a");
        assert_eq!(r.kvs[0].value, b"1");
        assert_eq!(r.kvs[0].mod_revision, 2);
        let r: RangeResponse = serde_json::from_str(EMPTY_RANGE).expect("parse");
        assert_eq!((r.header.revision, r.kvs.len(), r.more, r.count), (4, 0, false, 0));
    }

    #[test]
    fn reads_watch_lines() {
        let l: WatchLine = serde_json::from_str(CREATED).expect("parse");
        let r = l.result.expect("result");
        assert!(r.created && !r.canceled && r.events.is_empty());

        let r = serde_json::from_str::<WatchLine>(EVENTS)
            .expect("parse")
            .result
            .expect("result");
        let got: Vec<_> = r
            .events
            .iter()
            .map(|e| (e.kind, e.kv.key.as_slice(), e.kv.value.as_slice(), e.kv.mod_revision))
            .collect();
        assert_eq!(
            got,
            [
                (EventKind::Put, &b"/mcr/c"[..], &b""[..], 5),
                (EventKind::Delete, b"/mcr/a", b"", 6),
                (EventKind::Put, b"/mcr/t1", b"x", 7),
            ]
        );

        let r = serde_json::from_str::<WatchLine>(COMPACTED)
            .expect("parse")
            .result
            .expect("result");
        assert!(r.canceled);
        assert_eq!(r.compact_revision, 8);

        let progress = r#"{"result":{"header":{"revision":"12"}}}"#;
        let r = serde_json::from_str::<WatchLine>(progress)
            .expect("parse")
            .result
            .expect("result");
        // A progress notification: nothing but a revision.
        assert!(!r.created && !r.canceled && r.events.is_empty());
        assert_eq!(r.header.revision, 12);
    }

    #[test]
    fn reads_errors() {
        let e: ErrorBody = serde_json::from_str(FAILED).expect("parse");
        assert_eq!(e.code, 11);
        assert!(e.message.contains("compacted"));
        let l: WatchLine =
            serde_json::from_str(r#"{"error":{"grpc_code":14,"http_code":503,"message":"transport is closing","http_status":"Service Unavailable"}}"#)
                .expect("parse");
        assert_eq!(stream_error_message(&l.error.expect("error")), "transport is closing");
        assert_eq!(stream_error_message(&serde_json::json!("plain")), "plain");
    }

    #[test]
    fn writes_requests_as_the_gateway_reads_them() {
        let r = RangeRequest {
            key: b"/mcr/",
            range_end: b"/mcr0",
            limit: 256,
            revision: 0,
            count_only: false,
        };
        assert_eq!(
            serde_json::to_string(&r).expect("json"),
            r#"{"key":"L21jci8=","range_end":"L21jcjA=","limit":"256"}"#
        );
        let w = WatchRequest {
            create_request: WatchCreate {
                key: b"/mcr/",
                range_end: b"/mcr0",
                start_revision: 9,
                progress_notify: true,
            },
        };
        assert_eq!(
            serde_json::to_string(&w).expect("json"),
            r#"{"create_request":{"key":"L21jci8=","range_end":"L21jcjA=","start_revision":"9","progress_notify":true}}"#
        );
    }

    #[test]
    fn prefix_ranges() {
        assert_eq!(prefix_end(b"/mcr/"), b"/mcr0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff\xff"), [0]);
        assert_eq!(prefix_end(b""), [0]);
        assert_eq!(range_start(b""), [0]);
        assert_eq!(range_start(b"/x"), b"/x");
    }

    #[test]
    fn bad_base64_or_integer_is_an_error() {
        assert!(serde_json::from_str::<KeyValue>(r#"{"key":"!!"}"#).is_err());
        assert!(serde_json::from_str::<Header>(r#"{"revision":"x"}"#).is_err());
        assert_eq!(
            serde_json::from_str::<Header>(r#"{"revision":5}"#)
                .expect("number")
                .revision,
            5
        );
    }
}
