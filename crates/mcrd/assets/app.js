// MCR's live page.
//
// Fetches GET /api/overview once a second and shows it: the daemon's totals
// in the header, one row per rule (a table on a wide screen, a card per rule
// on a phone), the eBPF data path and the workers, and the recent events.
//
// Rows are kept by rule name: each update rebuilds only the cells whose data
// changed, and drops the rows of rules that are gone, so a daemon with a
// thousand rules updates without a flicker. Every string from the daemon
// enters the page as text (text nodes, textContent, attribute values), never
// as markup: rule names are user input.
//
// Hooks for tests: each rule's row carries data-rule="NAME" and its rate
// element data-pps="PACKETS_PER_SECOND"; #updated counts the successful
// updates in data-updates; #rules, #workers and #events are the sections.

"use strict";

const POLL_MS = 1000; // from the start of one fetch to the next
const TIMEOUT_MS = 5000; // a fetch that takes longer has failed
const TOKEN_KEY = "mcr-token"; // sessionStorage key of the bearer token
const SPARK_SAMPLES = 60; // the daemon keeps a minute of history
const SPARK_W = 120;
const SPARK_H = 28;
const OUTPUTS_SHOWN = 4; // more outputs than this fold into "N more"

const $ = (id) => document.getElementById(id);

// ---------------------------------------------------------------- helpers

// h("div", {class: "x"}, "text", child): an element whose children are the
// given nodes and strings (strings become text nodes: never parsed as HTML).
// Attributes that are null, undefined or false are left out.
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== null && v !== undefined && v !== false) el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c !== null && c !== undefined && c !== false && c !== "") el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

const SVG_NS = "http://www.w3.org/2000/svg";
function svg(tag, attrs) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  return el;
}

// Three significant digits at most: 1.23, 12.3, 123.
function sig3(x) {
  const a = Math.abs(x);
  return a >= 99.95 ? x.toFixed(0) : a >= 9.995 ? x.toFixed(1) : x.toFixed(2);
}

function scaled(v, units) {
  v = Number(v) || 0;
  for (let i = units.length - 1; i > 0; i--) {
    const [div, unit] = units[i];
    if (Math.abs(v) >= div) return `${sig3(v / div)}\u00a0${unit}`;
  }
  return `${Math.round(v)}\u00a0${units[0][1]}`;
}
// (Number and unit are joined by a no-break space: a unit never wraps alone.)

const fmtPps = (v) => scaled(v, [[1, "pps"], [1e3, "kpps"], [1e6, "Mpps"]]);
const fmtBps = (v) => scaled(v, [[1, "b/s"], [1e3, "kb/s"], [1e6, "Mb/s"], [1e9, "Gb/s"]]);
const fmtCount = (n) => (Number(n) || 0).toLocaleString();
const plural = (n, one, many) => `${fmtCount(n)} ${n === 1 ? one : many}`;

function fmtDuration(s) {
  s = Math.max(0, Math.floor(s));
  const d = Math.floor(s / 86400);
  const hh = Math.floor((s % 86400) / 3600);
  const m = Math.floor((s % 3600) / 60);
  if (d) return `${d} d ${hh} h`;
  if (hh) return `${hh} h ${m} min`;
  if (m) return `${m} min ${s % 60} s`;
  return `${s} s`;
}

const fmtJitter = (us) => (us >= 1000 ? `${sig3(us / 1000)}\u00a0ms` : `${Math.round(us)}\u00a0µs`);

// A local time of day; with the date when it is not today.
function fmtTime(ms) {
  const d = new Date(ms);
  const t = d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });
  if (d.toDateString() === new Date().toDateString()) return t;
  return `${d.toLocaleDateString([], { month: "short", day: "numeric" })} ${t}`;
}

// A rule's input and output in the text form mcrctl uses, from the rule's
// JSON (only for rules the statistics do not cover yet).
function inputText(i) {
  if (typeof i === "string") return i;
  if (i.srt) return srtText(i.srt);
  if (i.rist) return ristText(i.rist);
  let s = `${i.interface}:${i.destination}`;
  if (i.vlan != null) s += `,vlan=${i.vlan}`;
  for (const src of i.sources || []) s += `,source=${src}`;
  return s;
}

// An SRT endpoint's text form (the settings that differ from the default).
function srtText(e) {
  let s = `srt://${e.address},mode=${e.mode}`;
  if (e.latency_ms != null) s += `,latency=${e.latency_ms}`;
  if (e.passphrase_file != null) s += `,passphrase-file=${e.passphrase_file}`;
  if (e.stream_id != null) s += `,streamid=${e.stream_id}`;
  if (e.max_callers != null) s += `,max-callers=${e.max_callers}`;
  return s;
}

// A RIST endpoint's text form (the settings that differ from the default).
function ristText(e) {
  let s = `rist://${e.address},mode=${e.mode}`;
  if (e.profile != null) s += `,profile=${e.profile}`;
  if (e.buffer_ms != null) s += `,buffer=${e.buffer_ms}`;
  if (e.secret_file != null) s += `,secret-file=${e.secret_file}`;
  if (e.max_peers != null) s += `,max-peers=${e.max_peers}`;
  return s;
}

function outputText(o) {
  if (typeof o === "string") return o;
  if (o.srt) return srtText(o.srt);
  if (o.rist) return ristText(o.rist);
  let s = `${o.interface}:${o.destination}`;
  if (o.vlan != null) s += `,vlan=${o.vlan}`;
  if (o.ttl != null && o.ttl !== "decrement") s += `,ttl=${o.ttl}`;
  if (o.dscp != null && o.dscp !== "keep") s += `,dscp=${o.dscp}`;
  if (o.source != null && o.source !== "interface") s += `,source=${o.source}`;
  return s;
}

// An address in text form, with a line-break opportunity after each comma
// (so "…:6002,ttl=8,dscp=34" wraps between its options, not inside one).
function addr(text) {
  const parts = text.split(",");
  return parts.flatMap((p, i) => (i ? [",", h("wbr"), p] : [p]));
}

// The non-zero entries of a drops map, as [reason, count] pairs.
const nonzero = (drops) => Object.entries(drops || {}).filter(([, n]) => n > 0);
const reasonText = (r) => r.replaceAll("_", " ");
const sum = (xs, f) => xs.reduce((a, x) => a + (Number(f(x)) || 0), 0);

// ------------------------------------------------------------ rule model

// Everything a rule's row shows, from its status, its statistics and its
// history (any of which may be missing while a rule comes or goes).
function ruleView(name, status, st, hist) {
  const rule = status ? status.rule : null;
  const problems = new Set((st && st.problems) || []);
  for (const j of (status && status.joins) || []) {
    if (!j.joined) problems.add(`not joined to ${j.group} on ${j.interface}: ${j.error || "?"}`);
  }
  for (const p of (status && status.problems) || []) problems.add(p);

  const health = new Map(((st && st.health) || []).map((x) => [x.input, x]));
  const red = st ? st.redundancy : null;
  let inputs;
  if (red) {
    inputs = red.inputs.map((c, i) => ({ text: c.input, n: i + 1, counters: c }));
  } else if (st) {
    inputs = [{ text: st.input, n: 1 }];
  } else if (rule) {
    const all = [rule.input, ...((rule.redundancy && rule.redundancy.inputs) || [])];
    inputs = all.map((x, i) => ({ text: inputText(x), n: i + 1 }));
  } else {
    inputs = [];
  }
  for (const i of inputs) i.health = health.get(i.text) || null;
  for (const x of (st && st.srt_inputs) || []) if (inputs[x.index]) inputs[x.index].link = ["SRT", x.srt];
  for (const x of (st && st.rist_inputs) || []) if (inputs[x.index]) inputs[x.index].link = ["RIST", x.rist];

  const outputs = st
    ? st.outputs.map((o) => ({
        text: o.output,
        pps: o.pps,
        bps: o.bps,
        drops: nonzero(o.drops),
        held: o.held || 0,
        link: o.srt ? ["SRT", o.srt] : o.rist ? ["RIST", o.rist] : null,
      }))
    : ((rule && rule.outputs) || []).map((o) => ({ text: outputText(o), pps: 0, bps: 0, drops: [], held: 0 }));

  const pps = st ? st.pps : 0;
  const noSignal = inputs.filter((i) => (i.health && !i.health.signal) || (i.counters && !(i.counters.pps > 0)));
  let state;
  if (problems.size) state = ["bad", "problem"];
  else if (!(pps > 0)) state = ["idle", "no traffic"];
  else if (noSignal.length) state = ["warn", "degraded"];
  else state = ["ok", "forwarding"];

  return {
    name,
    state,
    problems: [...problems],
    noSignal: noSignal.length,
    mode: red
      ? {
          text: red.mode,
          lost: red.lost,
          switches: red.switches,
          active: red.active ?? null,
          forced: red.forced ?? null,
        }
      : null,
    inputs,
    healthOff: (st && st.health_not_followed) || (rule && rule.health === false ? "turned off for this rule" : null),
    outputs,
    drops: sum(outputs, (o) => sum(o.drops, (d) => d[1])),
    pps,
    bps: st ? st.bps : 0,
    datapath: st ? st.datapath : "",
    datapathReason: (st && st.datapath_reason) || null,
    history: (hist && hist.pps) || [],
  };
}

// ----------------------------------------------------------- rule rows

// One rule's <tr>: its cells, what each was last built from, its sparkline.
class RuleRow {
  constructor(name) {
    this.name = name;
    this.el = h("tr", { class: "rule", "data-rule": name });
    this.cells = {};
    this.built = {};
    for (const [key, label, cls] of [
      ["name", "Rule", "c-name"],
      ["state", "State", "c-state"],
      ["inputs", "Input", "c-io"],
      ["outputs", "Outputs", "c-io"],
      ["rate", "Rate", "c-rate num"],
      ["spark", "Last 60 s", "c-spark"],
    ]) {
      this.cells[key] = h("td", { class: cls, "data-label": label });
      this.el.append(this.cells[key]);
    }
    this.spark = new Sparkline();
    this.cells.spark.append(this.spark.el);
    this.prevDrops = null;
    this.search = "";
  }

  update(v) {
    // Drops that grew since the last update make a forwarding rule a warning.
    const dropping = this.prevDrops !== null && v.drops > this.prevDrops;
    this.prevDrops = v.drops;
    if (dropping && v.state[0] === "ok") v.state = ["warn", "dropping"];
    this.el.dataset.state = v.state[1];

    this.set("name", [v.name, v.datapath, v.datapathReason], () => [
      h("div", { class: "rule-name" }, v.name),
      h(
        "div",
        { class: "sub" },
        v.datapath === "ebpf" ? "eBPF" : v.datapath ? "workers" : "",
        v.datapathReason ? ` · ${v.datapathReason}` : "",
      ),
    ]);
    this.set("state", [v.state, v.problems, v.noSignal], () => [
      h("span", { class: `badge ${v.state[0]}` }, v.state[1]),
      v.noSignal && !v.problems.length
        ? h("div", { class: "sub warn-text" }, `${v.noSignal} of ${v.inputs.length} inputs without signal`)
        : null,
      v.problems.length ? h("ul", { class: "problems" }, v.problems.map((p) => h("li", null, p))) : null,
    ]);
    this.set("inputs", [v.inputs, v.mode, v.healthOff], () => inputsCell(v));
    const details = this.cells.outputs.querySelector("details");
    const open = details ? details.open : false;
    this.set("outputs", [v.outputs], () => outputsCell(v.outputs, open));
    this.set("rate", [v.pps, v.bps], () =>
      h("div", { class: "rate", "data-pps": v.pps }, h("span", { class: "pps" }, fmtPps(v.pps)), h("span", { class: "bps" }, fmtBps(v.bps))),
    );
    this.spark.update(v.history);

    this.search = [v.name, ...v.inputs.map((i) => i.text), ...v.outputs.map((o) => o.text), ...v.problems, v.state[1]]
      .join("\n")
      .toLowerCase();
  }

  // Rebuilds cell `key` from build() when `data` differs from last time.
  set(key, data, build) {
    const sig = JSON.stringify(data);
    if (this.built[key] === sig) return;
    this.built[key] = sig;
    const content = build();
    this.cells[key].replaceChildren(...(Array.isArray(content) ? content : [content]).filter(Boolean));
  }
}

// The counters of one input of a rule with several, as "name value" items.
function redundancyItems(c, mode) {
  const items = [[fmtPps(c.pps)], [fmtBps(c.bps)], [`forwarded ${fmtCount(c.forwarded)}`]];
  if (mode.startsWith("merge")) {
    items.push([`dup ${fmtCount(c.duplicates)}`], [`filled ${fmtCount(c.filled)}`]);
  }
  if (mode.startsWith("arbitrate")) items.push([`copies ${fmtCount(c.duplicates)}`]);
  for (const [k, label] of [["too_late", "too late"], ["strays", "strays"], ["not_rtp", "not RTP"]]) {
    if (c[k] > 0) items.push([`${label} ${fmtCount(c[k])}`, "bad"]);
  }
  return items;
}

// An arbitrated line's own sequence and its place in the race: messages,
// gaps, the error counters that are not zero, and how far behind the first
// copy its copies came (median and p99).
function lineItems(l) {
  const items = [[`${fmtCount(l.messages)} messages`], [`gaps ${fmtCount(l.gaps)}`, l.gaps > 0 ? "warn-text" : null]];
  for (const [k, label] of [
    ["duplicates", "dup in line"],
    ["wrong_session", "wrong session"],
    ["malformed", "malformed"],
  ]) {
    if (l[k] > 0) items.push([`${label} ${fmtCount(l[k])}`, "bad"]);
  }
  if (l.resets > 0) items.push([`resets ${fmtCount(l.resets)}`]);
  if (l.lag_samples > 0) items.push([`behind the first: median ${fmtJitter(l.lag_p50_us)}, p99 ${fmtJitter(l.lag_p99_us)}`]);
  else items.push(["never behind the first lately"]);
  return items;
}

function itemList(items) {
  return h(
    "div",
    { class: "meta" },
    items.map(([text, cls], i) => [i ? " · " : "", h("span", { class: cls ? `it ${cls}` : "it" }, text)]),
  );
}

const CARRIES = { none: "nothing yet", other: "not RTP or MPEG-TS", rtp: "RTP", ts: "MPEG-TS", "rtp-ts": "MPEG-TS in RTP" };

// An input's health in one line: what it carries, its signal, and only the
// error counters that are not zero ("no errors" when none is).
function healthLine(hl) {
  const items = [[CARRIES[hl.carries] || hl.carries]];
  if (hl.signal) items.push(["signal", "ok-text"]);
  else {
    const since = hl.since_last_ms != null ? ` for ${fmtDuration(hl.since_last_ms / 1000)}` : "";
    items.push([`no signal${since}`, "bad"]);
  }
  const errors = [];
  const full = [];
  if (hl.rtp) {
    const r = hl.rtp;
    for (const [k, label, cls] of [
      ["lost", "lost", "bad"],
      ["late", "late", "warn-text"],
      ["duplicates", "dup", "warn-text"],
      ["restarts", "restarts", "warn-text"],
    ]) {
      full.push(`RTP ${label} ${r[k]}`);
      if (r[k] > 0) errors.push([`RTP ${label} ${fmtCount(r[k])}`, cls]);
    }
    full.push(`jitter ${fmtJitter(r.jitter_us)}`);
  }
  if (hl.ts) {
    const t = hl.ts;
    for (const [k, label] of [
      ["sync_losses", "TS sync loss"],
      ["sync_byte_errors", "sync byte"],
      ["pat_errors", "PAT"],
      ["continuity_errors", "CC"],
    ]) {
      full.push(`${label} ${t[k]}`);
      if (t[k] > 0) errors.push([`${label} ${fmtCount(t[k])}`, "bad"]);
    }
  }
  if (hl.rtp || hl.ts) items.push(...(errors.length ? errors : [["no errors", "ok-text"]]));
  if (hl.rtp) items.push([`jitter ${fmtJitter(hl.rtp.jitter_us)}`]);
  const line = itemList(items);
  line.classList.add("health");
  if (full.length) line.title = full.join(", ");
  return line;
}

function inputsCell(v) {
  const out = [];
  const m = v.mode;
  if (m) {
    const failover = m.text.startsWith("failover");
    const bits = [[m.text, "mode"]];
    if (failover) {
      if (m.active != null) bits.push([`on input ${m.active}`]);
      if (m.forced != null) bits.push([`held to input ${m.forced}`, "warn-text"]);
      bits.push([plural(m.switches, "switch", "switches")]);
    } else if (m.lost > 0) bits.push([`lost ${fmtCount(m.lost)}`, "bad"]);
    else bits.push(["nothing lost"]);
    out.push(itemList(bits));
  }
  for (const i of v.inputs) {
    const active = m && m.active === i.n;
    out.push(
      h(
        "div",
        { class: "io" },
        h(
          "div",
          { class: "addr" },
          v.inputs.length > 1 ? h("span", { class: "n" }, String(i.n)) : null,
          addr(i.text),
          active ? h("span", { class: "tag" }, "active") : null,
        ),
        i.counters ? itemList(redundancyItems(i.counters, m ? m.text : "")) : null,
        i.counters && i.counters.line ? itemList(lineItems(i.counters.line)) : null,
        i.health ? healthLine(i.health) : null,
        i.link ? linkLines(...i.link) : null,
      ),
    );
  }
  if (v.healthOff) out.push(h("div", { class: "meta" }, `health not followed: ${v.healthOff}`));
  return out;
}

function outputLine(o) {
  const items = [[fmtPps(o.pps)], [fmtBps(o.bps)]];
  for (const [reason, n] of o.drops) items.push([`${reasonText(reason)} ${fmtCount(n)}`, "bad"]);
  if (o.held > 0) items.push([`held while standby ${fmtCount(o.held)}`]);
  return h(
    "div",
    { class: "io" },
    h("div", { class: "addr" }, addr(o.text)),
    itemList(items),
    o.link ? linkLines(...o.link) : null,
  );
}

// An SRT or RIST endpoint (`protocol`): its state, its refusals, and a
// line per connection.
function linkLines(protocol, s) {
  const head = [[`${protocol} ${s.state}`, s.error ? "bad" : "ok-text"]];
  if (s.error) head.push([s.error, "bad"]);
  head.push([plural(s.connections.length, "connection", "connections")]);
  for (const [reason, n] of nonzero(s.refused)) head.push([`refused ${reasonText(reason)} ${fmtCount(n)}`, "warn-text"]);
  const lines = [itemList(head)];
  for (const c of s.connections) {
    const items = [[c.stream_id ? `${c.peer} ${c.stream_id}` : c.peer], [`rtt ${c.rtt_ms.toFixed(1)} ms`]];
    items.push([`retransmitted ${fmtCount(c.retransmitted)}`]);
    if (protocol === "srt") items.push([`reported missing ${fmtCount(c.reported_missing)}`]);
    items.push(c.lost > 0 ? [`lost ${fmtCount(c.lost)}`, "bad"] : ["lost 0"]);
    if (c.dropped_too_late > c.lost) items.push([`too late ${fmtCount(c.dropped_too_late)}`, "bad"]);
    if (c.queue_full > 0) items.push([`queue full ${fmtCount(c.queue_full)}`, "bad"]);
    items.push([`latency ${c.latency_ms} ms`]);
    const line = itemList(items);
    line.classList.add("srt-conn");
    lines.push(line);
  }
  return lines;
}

function outputsCell(outputs, open) {
  if (outputs.length <= OUTPUTS_SHOWN) return outputs.map(outputLine);
  const shown = outputs.slice(0, OUTPUTS_SHOWN - 1);
  const rest = outputs.slice(OUTPUTS_SHOWN - 1);
  const restDrops = sum(rest, (o) => sum(o.drops, (d) => d[1]));
  return [
    ...shown.map(outputLine),
    h(
      "details",
      { open },
      h(
        "summary",
        null,
        `${rest.length} more outputs`,
        restDrops ? h("span", { class: "bad" }, ` · ${fmtCount(restDrops)} dropped`) : null,
      ),
      rest.map(outputLine),
    ),
  ];
}

// An inline chart of the last minute's packet rate: a line over a faint
// area, scaled to its own peak, the newest sample at the right edge.
class Sparkline {
  constructor() {
    this.el = svg("svg", { class: "spark", viewBox: `0 0 ${SPARK_W} ${SPARK_H}`, preserveAspectRatio: "none", role: "img" });
    this.title = svg("title");
    this.area = svg("polygon", { class: "spark-area" });
    this.line = svg("polyline", { class: "spark-line" });
    this.el.append(this.title, this.area, this.line);
    this.sig = "";
  }

  update(samples) {
    const xs = samples.slice(-SPARK_SAMPLES).map((x) => Number(x) || 0);
    const sig = xs.join(",");
    if (sig === this.sig) return;
    this.sig = sig;
    if (xs.length < 2) {
      this.line.setAttribute("points", "");
      this.area.setAttribute("points", "");
      this.title.textContent = "no history yet";
      return;
    }
    const peak = Math.max(...xs);
    const top = peak > 0 ? peak * 1.15 : 1;
    const step = SPARK_W / (SPARK_SAMPLES - 1);
    const x0 = SPARK_W - (xs.length - 1) * step;
    const pts = xs.map((v, i) => `${(x0 + i * step).toFixed(1)},${(SPARK_H - 1 - (v / top) * (SPARK_H - 2)).toFixed(1)}`);
    this.line.setAttribute("points", pts.join(" "));
    this.area.setAttribute("points", `${x0.toFixed(1)},${SPARK_H} ${pts.join(" ")} ${SPARK_W},${SPARK_H}`);
    this.title.textContent = `last ${xs.length} s: ${fmtPps(Math.min(...xs))} to ${fmtPps(peak)}`;
  }
}

// ------------------------------------------------------------- rendering

const rows = new Map(); // rule name → RuleRow
let filterText = "";

function renderRules(o) {
  const stats = new Map(((o.stats && o.stats.rules) || []).map((s) => [s.name, s]));
  const status = new Map((o.rules || []).map((r) => [r.rule.name, r]));
  const hist = (o.history && o.history.rules) || {};
  // The order rules were added in; rules only the statistics know yet last.
  const names = [...status.keys()];
  for (const n of stats.keys()) if (!status.has(n)) names.push(n);

  const tbody = $("rule-rows");
  const seen = new Set(names);
  for (const [name, row] of rows) {
    if (!seen.has(name)) {
      row.el.remove();
      rows.delete(name);
    }
  }
  let problems = 0;
  names.forEach((name, i) => {
    let row = rows.get(name);
    if (!row) {
      row = new RuleRow(name);
      rows.set(name, row);
    }
    const v = ruleView(name, status.get(name), stats.get(name), hist[name]);
    row.update(v);
    if (v.problems.length) problems++;
    if (tbody.children[i] !== row.el) tbody.insertBefore(row.el, tbody.children[i] || null);
  });
  applyFilter();
  $("no-rules").hidden = names.length > 0;
  setText("rule-count", String(names.length));
  const count = $("rule-count");
  if (problems) count.append(h("span", { class: "bad" }, ` · ${problems} with problems`));
}

function applyFilter() {
  const words = filterText.toLowerCase().split(/\s+/).filter(Boolean);
  let shown = 0;
  for (const row of rows.values()) {
    const match = words.every((w) => row.search.includes(w));
    row.el.hidden = !match;
    if (match) shown++;
  }
  setText("rules-shown", words.length ? `${shown} of ${rows.size} shown` : plural(rows.size, "rule", "rules"));
}

function renderHeader(o) {
  const st = o.stats || {};
  const rules = st.rules || [];
  setText("version", o.daemon ? `v${o.daemon}` : "");
  setText("uptime", st.uptime_s != null ? fmtDuration(st.uptime_s) : "–");
  setText("total-in", `${fmtPps(sum(rules, (r) => r.pps))} · ${fmtBps(sum(rules, (r) => r.bps))}`);
  const outs = rules.flatMap((r) => r.outputs || []);
  setText("total-out", `${fmtPps(sum(outs, (x) => x.pps))} · ${fmtBps(sum(outs, (x) => x.bps))}`);

  const workers = (o.workers || []).length;
  const dp = $("datapath");
  dp.className = "";
  if (st.datapath) {
    setText("datapath", `eBPF on ${st.datapath.interfaces.join(", ") || "no interface yet"} + ${plural(workers, "worker", "workers")}`);
  } else if (st.datapath_missing) {
    setText("datapath", `${plural(workers, "worker", "workers")} only`);
    dp.className = "warn-text";
  } else {
    setText("datapath", plural(workers, "worker", "workers"));
  }
  // The NMOS node: where it is registered, or peer to peer.
  const nmos = o.nmos;
  $("nmos-item").hidden = !nmos;
  if (nmos) {
    const reg = nmos.registration;
    const where = reg.registry
      ? `registered · ${reg.registry}`
      : reg.last_error
        ? "registered nowhere (peer to peer)"
        : "peer to peer";
    $("nmos").className = !reg.registry && reg.known.length ? "warn-text" : "";
    $("nmos").title = reg.last_error || "";
    setText("nmos", `${where} · ${nmos.senders} senders, ${nmos.receivers} receivers`);
  }
  // Standby: everything ready, nothing sent (mcrctl role).
  const role = st.role;
  $("role").className = role && role.role === "standby" ? "warn-text" : "";
  setText("role", !role ? "–" : role.role === "standby" ? `standby · ${fmtCount(role.held)} held` : "active");
  // Rules from etcd: say when it is away or refused a key.
  const store = st.store;
  let storeText = "";
  if (store && !store.connected) {
    const kind = store.problem_kind && store.problem_kind !== "unreachable" ? ` (${store.problem_kind})` : "";
    storeText = `etcd (${store.prefix}) is not reached${kind}: ${store.problem}. Its ${store.rules} rules keep forwarding as last given.`;
  } else if (store && store.refused.length) {
    const first = store.refused[0];
    storeText = `etcd: ${plural(store.refused.length, "key", "keys")} refused, such as ${first.key}: ${first.error}`;
  }
  const sw = $("store-warning");
  sw.hidden = !storeText;
  sw.textContent = storeText;
  const warn = $("path-warning");
  warn.hidden = !st.datapath_missing;
  if (st.datapath_missing) {
    warn.textContent = `The eBPF data path is not running: ${st.datapath_missing}. The workers forward every rule.`;
  }
}

function renderWorkers(o) {
  const st = o.stats || {};
  const dp = st.datapath;
  const kp = $("kernel-path");
  if (dp) {
    kp.replaceChildren(
      h("strong", null, "eBPF program"),
      ` on ${dp.interfaces.join(", ") || "no interface yet"}: ${fmtPps(dp.rx_pps)} · ${fmtCount(dp.rx_frames)} frames in · ${fmtCount(dp.tx_packets)} copies out`,
      dp.health_missed > 0 ? h("span", { class: "warn-text" }, ` · ${fmtCount(dp.health_missed)} health records missed`) : "",
    );
  } else if (st.datapath_missing) {
    kp.replaceChildren(h("strong", { class: "warn-text" }, "eBPF program not loaded: "), st.datapath_missing);
  } else {
    kp.replaceChildren(h("strong", null, "eBPF program off:"), " the workers forward every rule.");
  }

  const counters = new Map((st.workers || []).map((w) => [w.index, w]));
  const list = o.workers || [];
  const sig = JSON.stringify([list, st.workers]);
  if (sig === renderWorkers.sig) return;
  renderWorkers.sig = sig;
  $("worker-rows").replaceChildren(
    ...list.map((w) => {
      const c = counters.get(w.index) || {};
      const busy = Math.max(0, Math.min(1, Number(c.busy) || 0));
      const meter = h("span", { class: "meter" }, h("span"));
      meter.firstChild.style.width = `${(busy * 100).toFixed(1)}%`;
      const drops = nonzero(c.drops);
      const stateCls = w.state === "running" ? "ok" : "warn";
      return h(
        "tr",
        { "data-worker": w.index },
        h("td", { "data-label": "Worker" }, h("strong", null, `#${w.index}`)),
        h("td", { class: "num", "data-label": "PID" }, w.pid != null ? String(w.pid) : "–"),
        h("td", { class: "num", "data-label": "CPU" }, String(w.cpu)),
        h("td", { "data-label": "State" }, h("span", { class: `badge ${stateCls}` }, w.state)),
        h("td", { class: `num${w.restarts > 0 ? " warn-text" : ""}`, "data-label": "Restarts" }, fmtCount(w.restarts)),
        h("td", { class: "num", "data-label": "Busy" }, meter, ` ${(busy * 100).toFixed(1)} %`),
        h("td", { class: "num", "data-label": "Rx" }, fmtPps(c.rx_pps)),
        h(
          "td",
          { class: `num${c.ring_drops > 0 || c.ring_errors > 0 ? " bad" : ""}`, "data-label": "Ring drops" },
          fmtCount(c.ring_drops),
          c.ring_errors > 0 ? ` (${plural(c.ring_errors, "error", "errors")})` : "",
        ),
        h(
          "td",
          { "data-label": "Drops" },
          drops.length ? drops.map(([r, n], i) => [i ? ", " : "", `${reasonText(r)} ${fmtCount(n)}`]) : h("span", { class: "muted" }, "none"),
        ),
        h(
          "td",
          { "data-label": "Last exit" },
          w.last_exit ? w.last_exit : h("span", { class: "muted" }, "–"),
          (w.problems || []).length ? h("ul", { class: "problems" }, w.problems.map((p) => h("li", null, p))) : null,
        ),
      );
    }),
  );
}

function renderEvents(o) {
  const events = o.events || [];
  const last = events[events.length - 1];
  const sig = `${events.length}:${events[0] ? events[0].at_ms : ""}:${last ? `${last.at_ms}:${last.message}` : ""}`;
  if (sig === renderEvents.sig) return;
  renderEvents.sig = sig;
  $("no-events").hidden = events.length > 0;
  $("event-list").replaceChildren(
    ...events
      .slice()
      .reverse()
      .map((e) => {
        const level = ["info", "warn", "error"].includes(e.level) ? e.level : "info";
        return h(
          "li",
          { class: `event ${level}` },
          h("time", { datetime: new Date(e.at_ms).toISOString() }, fmtTime(e.at_ms)),
          h("span", { class: "level" }, e.level),
          h("span", { class: "message" }, e.message),
        );
      }),
  );
}

function setText(id, text) {
  const el = $(id);
  if (el.textContent !== text) el.textContent = text;
}

// --------------------------------------------------------------- polling

let updates = 0;
let lastUpdate = 0;
let timer = 0;
let busy = false;

class AuthNeeded extends Error {}

function storedToken() {
  try {
    return sessionStorage.getItem(TOKEN_KEY);
  } catch {
    return null;
  }
}

async function fetchOverview() {
  const headers = { Accept: "application/json" };
  const token = storedToken();
  if (token) headers.Authorization = `Bearer ${token}`;
  const abort = new AbortController();
  const timeout = setTimeout(() => abort.abort(), TIMEOUT_MS);
  try {
    const res = await fetch("/api/overview", { cache: "no-store", headers, signal: abort.signal });
    if (res.status === 401) throw new AuthNeeded((await problem(res)) || (token ? "the token was refused" : "a token is needed"));
    if (!res.ok) {
      const why = await problem(res);
      const status = `HTTP ${res.status}${res.statusText ? ` ${res.statusText}` : ""}`;
      throw new Error(why ? `${status}: ${why}` : status);
    }
    try {
      return await res.json();
    } catch (e) {
      throw new Error(`its answer is not JSON (${e.message})`);
    }
  } catch (e) {
    if (e.name === "AbortError") throw new Error(`no answer within ${TIMEOUT_MS / 1000} s`);
    if (e instanceof TypeError) throw new Error(`no connection (${e.message})`);
    throw e;
  } finally {
    clearTimeout(timeout);
  }
}

// What a refusal says: the detail of a problem document (RFC 9457, as mcrd
// answers), else the start of its text.
async function problem(res) {
  const text = (await res.text().catch(() => "")).trim();
  try {
    const p = JSON.parse(text);
    if (p && typeof p.detail === "string") return p.detail;
  } catch {
    // Not JSON: the text itself.
  }
  return text.slice(0, 200);
}

function showBanner(text) {
  const b = $("banner");
  b.hidden = !text;
  if (text) b.textContent = text;
  document.body.classList.toggle("stale", Boolean(text));
}

async function poll() {
  if (busy) return;
  busy = true;
  const started = performance.now();
  try {
    let o;
    try {
      o = await fetchOverview();
    } catch (e) {
      const auth = e instanceof AuthNeeded;
      $("auth").hidden = !auth;
      const since = lastUpdate ? ` (last update ${fmtTime(lastUpdate)})` : "";
      showBanner(auth ? `mcrd asks for a bearer token: ${e.message}` : `mcrd not answering: ${e.message}${since}; retrying.`);
      return;
    }
    $("auth").hidden = true;
    const drawn = performance.now();
    try {
      renderHeader(o);
      renderRules(o);
      renderWorkers(o);
      renderEvents(o);
    } catch (e) {
      console.error(e);
      showBanner(`This page could not show mcrd's answer: ${e.message}`);
      return;
    }
    showBanner("");
    updates++;
    lastUpdate = Date.now();
    const u = $("updated");
    u.textContent = fmtTime(lastUpdate);
    u.dataset.updates = String(updates);
    u.dataset.renderMs = (performance.now() - drawn).toFixed(1); // how long this update took to show
  } finally {
    busy = false;
    clearTimeout(timer);
    timer = setTimeout(poll, Math.max(0, POLL_MS - (performance.now() - started)));
  }
}

function start() {
  $("filter").addEventListener("input", (e) => {
    filterText = e.target.value;
    applyFilter();
  });
  $("auth").addEventListener("submit", (e) => {
    e.preventDefault();
    const field = $("token");
    const token = field.value.trim();
    if (!token) return;
    try {
      sessionStorage.setItem(TOKEN_KEY, token);
    } catch {
      showBanner("This browser keeps no session storage: the token cannot be kept.");
      return;
    }
    field.value = "";
    $("auth").hidden = true;
    if (!busy) {
      clearTimeout(timer);
      poll();
    }
  });
  poll();
}

start();
