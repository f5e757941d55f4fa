//! Rules from a key-value store (etcd): one key per rule under a prefix,
//! its name the key's last part, its value the config file's `[[rule]]`
//! form. What the store says is turned here into the set of rules it
//! wants; the plane applies that set as a reload applies a file (only the
//! difference, unchanged rules untouched). A key whose value does not
//! parse, or whose rule the table refuses, is refused on its own: its
//! previous rule, if it had one, stays, and the rest applies. While the
//! store cannot be reached, its rules stay as they were.

use std::collections::BTreeMap;
use std::time::Instant;

use crate::config::Config;
use crate::control::{RefusedKey, StoreProblem, StoreStatus};
use crate::rule::Rule;

/// Keys (after the prefix) and their values, as the store holds them.
pub type Entries = Vec<(String, Vec<u8>)>;

/// What the store said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUpdate {
    /// Everything under the prefix at `revision` (on connecting, and after
    /// a reconnect or a compaction): keys not listed are gone.
    Whole {
        /// The store's revision.
        revision: i64,
        /// Each key (after the prefix) and its value.
        entries: Vec<(String, Vec<u8>)>,
    },
    /// What changed since the previous update, in order (none: deleted).
    Changes {
        /// The store's revision after them.
        revision: i64,
        /// Each key (after the prefix) and its new value.
        changes: Vec<(String, Option<Vec<u8>>)>,
    },
    /// What the store gave last, as the daemon kept it on disk
    /// (`[daemon.etcd] cache`): applied at the start, before etcd answers,
    /// like a whole read, but the store is not reached yet.
    Cached {
        /// The revision the cache was written at.
        revision: i64,
        /// Each key (after the prefix) and its value.
        entries: Vec<(String, Vec<u8>)>,
    },
    /// The store cannot be reached (why); its rules stay as they are.
    Unreachable {
        /// What failed.
        why: String,
        /// What kind of failure it is.
        kind: StoreProblem,
    },
}

/// Reads one key's value: the config file's `[[rule]]` fields, the name
/// optional (it is the key's, and must be if given).
pub fn rule_of(name: &str, value: &[u8]) -> Result<Rule, String> {
    let text = std::str::from_utf8(value).map_err(|_| "the value is not UTF-8 text".to_string())?;
    let table: toml::Table = toml::from_str(text).map_err(|e| format!("the value is not TOML: {}", e.message()))?;
    match table.get("name") {
        Some(toml::Value::String(n)) if n != name => {
            return Err(format!(
                "the key names rule `{name}` but the value's `name` is `{n}`: leave `name` out or make them the same"
            ));
        }
        Some(toml::Value::String(_)) | None => {}
        Some(_) => return Err("`name` must be a string".into()),
    }
    if let Some((k, _)) = table.iter().find(|(_, v)| v.is_table() || holds_tables(v)) {
        return Err(format!(
            "`{k}` is a table: a key holds one rule's fields (input, outputs, ...), not a config file"
        ));
    }
    // The value is the body of a `[[rule]]` table; a name it lacks goes
    // last, so that the positions of its own lines stay as they were.
    let mut doc = format!("[[rule]]\n{text}");
    if !table.contains_key("name") {
        let quoted = toml::Value::String(name.to_string()).to_string();
        doc.push_str(&format!("\nname = {quoted}\n"));
    }
    let config = Config::parse(&doc).map_err(|mut e| {
        e.line = e.line.saturating_sub(1);
        e.to_string()
    })?;
    let mut rules = config.rules;
    match (rules.pop(), rules.is_empty()) {
        (Some(r), true) => Ok(r),
        _ => Err("a key holds exactly one rule".into()),
    }
}

fn holds_tables(v: &toml::Value) -> bool {
    v.as_array().is_some_and(|a| a.iter().any(toml::Value::is_table))
}

/// What the plane keeps about the store.
#[derive(Debug)]
pub struct Store {
    prefix: String,
    endpoints: Vec<String>,
    /// Reachable (none) or why not, and since when.
    problem: Option<String>,
    /// The kind of the last failure while not reachable.
    kind: Option<StoreProblem>,
    since: Instant,
    /// Whether an update came at all.
    heard: bool,
    /// The revision of the last update applied.
    revision: i64,
    /// The newest revision whose table every live worker runs.
    workers_revision: i64,
    /// Table versions waiting for the workers, with the revision each
    /// carries, oldest first.
    pending: Vec<(u64, i64)>,
    /// Keys refused, with why and the revision they were refused at.
    refused: BTreeMap<String, (i64, String)>,
    /// The keys whose rules are applied (a key gives the rule of its own
    /// name), each with the revision its rule last changed at.
    applied: BTreeMap<String, i64>,
    /// The value each applied key holds (what the cache keeps).
    values: BTreeMap<String, Vec<u8>>,
    /// Something was applied since the cache was last written.
    dirty: bool,
    /// The rules forwarded are the cache's (its revision), until the
    /// store answers.
    cached: Option<i64>,
    updates: u64,
}

/// What an update wants, before the table checks it.
#[derive(Debug, Default)]
pub struct Wanted {
    /// Each key's rule, as the store would have it (a refused key keeps
    /// the rule it had).
    pub rules: BTreeMap<String, Rule>,
    /// Keys newly refused, with why.
    pub refused: Vec<(String, String)>,
    /// Keys that changed in this update (to be blamed, if the table
    /// refuses).
    pub touched: Vec<String>,
    /// The values of the keys whose rule parsed in this update.
    pub values: BTreeMap<String, Vec<u8>>,
}

impl Store {
    /// A store at `endpoints`, rules under `prefix`, not heard from yet.
    pub fn new(endpoints: Vec<String>, prefix: String, now: Instant) -> Self {
        Store {
            prefix,
            endpoints,
            problem: Some("not connected yet".into()),
            kind: None,
            since: now,
            heard: false,
            revision: 0,
            workers_revision: 0,
            pending: Vec::new(),
            refused: BTreeMap::new(),
            applied: BTreeMap::new(),
            values: BTreeMap::new(),
            dirty: false,
            cached: None,
            updates: 0,
        }
    }

    /// The whole key of `key` (after the prefix).
    pub fn full_key(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    /// The whole key that gives rule `name`, with the revision it last
    /// changed at, if the store gives it.
    pub fn key_of(&self, name: &str) -> Option<(String, i64)> {
        self.applied.get(name).map(|r| (self.full_key(name), *r))
    }

    /// Whether the store gives the rule `name`.
    pub fn gives(&self, name: &str) -> bool {
        self.applied.contains_key(name)
    }

    /// The keys whose rules are applied.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.applied.keys().map(String::as_str)
    }

    /// The revision key `key`'s rule last changed at.
    pub fn revision_of(&self, key: &str) -> Option<i64> {
        self.applied.get(key).copied()
    }

    /// How many rules the store gives.
    pub fn len(&self) -> usize {
        self.applied.len()
    }

    /// True when it gives none.
    pub fn is_empty(&self) -> bool {
        self.applied.is_empty()
    }

    /// The store's prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The store cannot be reached: true when that is news (it could be
    /// before, or the reason changed).
    pub fn unreachable(&mut self, why: String, kind: StoreProblem, now: Instant) -> bool {
        let why = match self.cached {
            Some(revision) => format!(
                "{why}; forwarding the {} rule(s) of the cache (revision {revision}) since the start",
                self.applied.len()
            ),
            None => why,
        };
        if self.problem.as_deref() == Some(why.as_str()) && self.kind == Some(kind) {
            return false;
        }
        self.kind = Some(kind);
        if self.problem.is_none() || !self.heard {
            self.since = now;
        }
        self.problem = Some(why);
        true
    }

    /// An update came: true when the store was unreachable before.
    pub fn reached(&mut self, now: Instant) -> bool {
        self.cached = None;
        let back = self.problem.is_some();
        if back {
            self.problem = None;
            self.kind = None;
            self.since = now;
        }
        self.heard = true;
        self.updates += 1;
        back
    }

    /// The rules `update` wants, from the rules the store gives now
    /// (`current`, by key). Keys that do not parse are refused.
    pub fn wanted(&mut self, update: &StoreUpdate, current: &BTreeMap<String, Rule>) -> Wanted {
        let mut w = Wanted::default();
        let revision = match update {
            StoreUpdate::Whole { revision, .. }
            | StoreUpdate::Cached { revision, .. }
            | StoreUpdate::Changes { revision, .. } => *revision,
            StoreUpdate::Unreachable { .. } => return w,
        };
        let entries: Vec<(&String, Option<&Vec<u8>>)> = match update {
            StoreUpdate::Whole { entries, .. } | StoreUpdate::Cached { entries, .. } => {
                w.rules = BTreeMap::new();
                // Keys that are gone: touched, so that their removal is
                // theirs.
                let listed: std::collections::HashSet<&String> = entries.iter().map(|(k, _)| k).collect();
                w.touched
                    .extend(current.keys().filter(|k| !listed.contains(k)).cloned());
                self.refused.retain(|k, _| listed.contains(k));
                entries.iter().map(|(k, v)| (k, Some(v))).collect()
            }
            StoreUpdate::Changes { changes, .. } => {
                w.rules = current.clone();
                changes.iter().map(|(k, v)| (k, v.as_ref())).collect()
            }
            StoreUpdate::Unreachable { .. } => Vec::new(),
        };
        for (key, value) in entries {
            match value {
                None => {
                    w.rules.remove(key);
                    self.refused.remove(key);
                    w.touched.push(key.clone());
                }
                Some(v) => match rule_of(key, v) {
                    Ok(rule) => {
                        if current.get(key) != Some(&rule) {
                            w.touched.push(key.clone());
                        }
                        self.refused.remove(key);
                        w.rules.insert(key.clone(), rule);
                        w.values.insert(key.clone(), v.clone());
                    }
                    Err(why) => {
                        match current.get(key) {
                            Some(old) => w.rules.insert(key.clone(), old.clone()),
                            None => w.rules.remove(key),
                        };
                        self.refused.insert(key.clone(), (revision, why.clone()));
                        w.refused.push((key.clone(), why));
                    }
                },
            }
        }
        w
    }

    /// Notes that the table refused `key`'s rule (why).
    pub fn refuse(&mut self, key: &str, revision: i64, why: String) {
        self.refused.insert(key.to_string(), (revision, why));
    }

    /// Notes what was applied: the keys whose rules the store now gives
    /// (each with the revision its rule changed at) at `revision`, in table
    /// `version`; `values`
    /// holds the new value of each key whose rule parsed in this update
    /// (the others keep theirs).
    pub fn applied(
        &mut self,
        revision: i64,
        version: u64,
        rules: BTreeMap<String, i64>,
        mut values: BTreeMap<String, Vec<u8>>,
    ) {
        let kept = rules
            .keys()
            .filter_map(|k| {
                let changed = rules[k] == revision;
                let v = if changed { values.remove(k) } else { None };
                v.or_else(|| self.values.get(k).cloned()).map(|v| (k.clone(), v))
            })
            .collect();
        self.dirty |= self.revision != revision || self.values != kept;
        self.values = kept;
        self.revision = revision;
        self.applied = rules;
        self.pending.push((version, revision));
    }

    /// What the cache should hold, if that changed since it was last
    /// taken: the revision and each applied key's value.
    pub fn take_cache(&mut self) -> Option<(i64, Entries)> {
        if !std::mem::take(&mut self.dirty) {
            return None;
        }
        Some((
            self.revision,
            self.values.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        ))
    }

    /// Says the rules forwarded are the cache's, until the store answers.
    pub fn from_cache(&mut self, revision: i64) {
        self.cached = Some(revision);
        self.problem = Some(format!(
            "not reached yet since the start: forwarding the {} rule(s) of the cache (revision {revision})",
            self.applied.len()
        ));
    }

    /// Every live worker runs table `acked`: the revisions it carries
    /// have reached them.
    pub fn acked(&mut self, acked: u64) {
        while let Some(&(v, r)) = self.pending.first() {
            if v > acked {
                break;
            }
            self.workers_revision = self.workers_revision.max(r);
            self.pending.remove(0);
        }
    }

    /// How it stands, for `list`, `stats` and `/metrics`.
    pub fn status(&self, now: Instant) -> StoreStatus {
        StoreStatus {
            endpoints: self.endpoints.clone(),
            prefix: self.prefix.clone(),
            connected: self.problem.is_none(),
            problem: self.problem.clone(),
            problem_kind: self.problem.as_ref().and(self.kind),
            since_s: now.saturating_duration_since(self.since).as_secs_f64(),
            revision: self.revision,
            workers_revision: self.workers_revision,
            rules: self.applied.len(),
            updates: self.updates,
            refused: self
                .refused
                .iter()
                .map(|(k, (revision, error))| RefusedKey {
                    key: self.full_key(k),
                    revision: *revision,
                    error: error.clone(),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FEED: &str = "input = \"eth0:239.1.1.1:5001\"\noutputs = [\"eth1:239.10.1.1:6001\"]\n";

    #[test]
    fn a_value_is_a_rules_fields_named_by_its_key() {
        let r = rule_of("feed-a", FEED.as_bytes()).expect("rule");
        assert_eq!((r.name.as_str(), r.outputs.len()), ("feed-a", 1));
        let named = format!("name = \"feed-a\"\n{FEED}");
        assert_eq!(rule_of("feed-a", named.as_bytes()).expect("rule"), r);
    }

    #[test]
    fn a_bad_value_says_what_is_wrong_and_where() {
        let e = rule_of(
            "feed-a",
            b"input = \"eth0:239.1.1.1:5001\"\noutputs = [\"eth1:nowhere\"]\n",
        )
        .expect_err("bad");
        assert!(e.starts_with("line 2, column"), "{e}");
        let e = rule_of("feed-a", format!("name = \"other\"\n{FEED}").as_bytes()).expect_err("bad");
        assert!(e.contains("the value's `name` is `other`"), "{e}");
        let e = rule_of("feed-a", format!("{FEED}[daemon]\nworkers = 2\n").as_bytes()).expect_err("bad");
        assert!(e.contains("`daemon` is a table"), "{e}");
        let e = rule_of("feed-a", b"{not toml").expect_err("bad");
        assert!(e.starts_with("the value is not TOML"), "{e}");
        assert_eq!(
            rule_of("feed-a", &[0xff, 0xfe]).expect_err("bad"),
            "the value is not UTF-8 text"
        );
        let e = rule_of("feed-a", format!("{FEED}colour = \"red\"\n").as_bytes()).expect_err("bad");
        assert!(e.contains("colour"), "{e}");
    }

    #[test]
    fn a_refused_key_keeps_its_rule_and_the_rest_applies() {
        let now = Instant::now();
        let mut s = Store::new(vec!["http://127.0.0.1:2379".into()], "/mcr/".into(), now);
        let whole = StoreUpdate::Whole {
            revision: 5,
            entries: vec![("a".into(), FEED.into()), ("b".into(), b"nonsense".to_vec())],
        };
        let w = s.wanted(&whole, &BTreeMap::new());
        assert_eq!(w.rules.keys().collect::<Vec<_>>(), ["a"]);
        assert_eq!(w.refused.len(), 1);
        let current = w.rules.clone();
        let change = StoreUpdate::Changes {
            revision: 6,
            changes: vec![
                ("a".into(), Some(b"broken = ".to_vec())),
                ("c".into(), Some(FEED.replace("239.1.1.1", "239.1.1.3").into())),
            ],
        };
        let w = s.wanted(&change, &current);
        assert_eq!(w.rules["a"], current["a"], "a keeps the rule it had");
        assert_eq!(w.rules.keys().collect::<Vec<_>>(), ["a", "c"]);
        assert_eq!(w.touched, ["c"]);
        let st = s.status(now);
        let refused: Vec<&str> = st.refused.iter().map(|r| r.key.as_str()).collect();
        assert_eq!(refused, ["/mcr/a", "/mcr/b"]);
        // A whole read without b forgets its refusal; a deletion of a
        // removes it.
        let w = s.wanted(
            &StoreUpdate::Whole {
                revision: 9,
                entries: vec![("a".into(), FEED.into())],
            },
            &w.rules,
        );
        assert_eq!(w.touched, ["c"], "c is gone");
        assert!(s.status(now).refused.is_empty());
    }

    #[test]
    fn the_workers_revision_follows_their_acknowledgements() {
        let now = Instant::now();
        let mut s = Store::new(Vec::new(), "/p/".into(), now);
        assert!(!s.status(now).connected);
        assert!(s.reached(now), "reached after not connected");
        assert!(!s.reached(now));
        s.applied(10, 3, BTreeMap::new(), BTreeMap::new());
        s.applied(12, 4, BTreeMap::new(), BTreeMap::new());
        s.acked(3);
        assert_eq!(s.status(now).workers_revision, 10);
        s.acked(4);
        assert_eq!(s.status(now).workers_revision, 12);
        assert!(s.unreachable("connection refused".into(), StoreProblem::Unreachable, now));
        assert!(
            !s.unreachable("connection refused".into(), StoreProblem::Unreachable, now),
            "not news"
        );
        assert_eq!(s.status(now).problem.as_deref(), Some("connection refused"));
    }
}
