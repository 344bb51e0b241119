// The Tempest dashboard: polls this node's API and its own /metrics and
// draws them. Everything it loads comes from this node (no network
// assets); requests carry the session cookie set by /ui/login when the
// node requires a token.
"use strict";

const POLL_MS = 2000;
const HISTORY_MS = 10 * 60 * 1000; // the asks/s chart's window
const state = {
  kinds: [],
  policies: {},    // kind -> this node's policy digest (GET /v1/kinds)
  manifests: {},   // node name -> {manifest, t}
  samples: [],     // {t, metrics} of recent scrapes, oldest first
  asks: [],        // {t, rate}
};

const $ = (id) => document.getElementById(id);

async function api(path, opts = {}) {
  const headers = Object.assign({"X-Tempest-UI": "1"}, opts.headers || {});
  const resp = await fetch(path, Object.assign({credentials: "same-origin"}, opts, {headers}));
  if (resp.status === 401) {
    location.href = "/ui/login";
    throw new Error("not signed in");
  }
  const text = await resp.text();
  if (!resp.ok) {
    let msg = resp.status + " " + resp.statusText;
    try { msg = JSON.parse(text).error || msg; } catch (e) { /* not JSON */ }
    throw new Error(msg);
  }
  return text;
}
const apiJSON = async (path, opts) => JSON.parse(await api(path, opts));

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

// parseMetrics reads the Prometheus text format into
// {name: [{labels, value}]}.
function parseMetrics(text) {
  const out = {};
  for (const line of text.split("\n")) {
    if (!line || line[0] === "#") continue;
    const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/);
    if (!m) continue;
    const labels = {};
    if (m[3]) {
      for (const lm of m[3].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[lm[1]] = lm[2];
    }
    (out[m[1]] = out[m[1]] || []).push({labels, value: parseFloat(m[4])});
  }
  return out;
}

function sum(metrics, name, match = {}) {
  let s = 0;
  for (const x of metrics[name] || []) {
    if (Object.entries(match).every(([k, v]) => x.labels[k] === v)) s += x.value;
  }
  return s;
}

// quantile from the difference of two scrapes of a histogram (the
// cumulative counts of each bucket), as histogram_quantile does.
function quantile(q, now, before, name, match) {
  const buckets = (m) => {
    const b = {};
    for (const x of m[name + "_bucket"] || []) {
      if (Object.entries(match).every(([k, v]) => x.labels[k] === v)) b[x.labels.le] = (b[x.labels.le] || 0) + x.value;
    }
    return b;
  };
  const a = buckets(now), b = before ? buckets(before) : {};
  const les = Object.keys(a).sort((x, y) => parseFloat(x) - parseFloat(y));
  const counts = les.map((le) => a[le] - (b[le] || 0));
  const total = counts.length ? counts[counts.length - 1] : 0;
  if (total <= 0) return null;
  const rank = q * total;
  let prevLe = 0, prevCount = 0;
  for (let i = 0; i < les.length; i++) {
    const le = parseFloat(les[i]);
    if (counts[i] >= rank) {
      if (!isFinite(le)) return prevLe;
      return prevLe + (le - prevLe) * (rank - prevCount) / Math.max(counts[i] - prevCount, 1e-12);
    }
    prevLe = le; prevCount = counts[i];
  }
  return prevLe;
}

function fmtSeconds(s) {
  if (s === null || s === undefined) return "–";
  if (s < 1e-3) return (s * 1e6).toFixed(0) + " µs";
  if (s < 1) return (s * 1e3).toFixed(1) + " ms";
  return s.toFixed(2) + " s";
}

// manifestOf returns a member's manifest, read again every 30 s.
async function manifestOf(name) {
  const cached = state.manifests[name];
  if (cached && Date.now() - cached.t < 30000) return cached.manifest;
  const body = await apiJSON("/v1/manifest?node=" + encodeURIComponent(name));
  state.manifests[name] = {manifest: body.manifest, t: Date.now()};
  return body.manifest;
}

async function refreshCluster() {
  const [members, placement] = await Promise.all([apiJSON("/v1/members"), apiJSON("/v1/placement")]);
  $("node").textContent = "node " + members.node + (members.leader ? ", raft leader " + members.leader : "");
  const shards = {}, follows = {};
  for (const n of placement.nodes || []) { shards[n.name] = n.shards; follows[n.name] = n.follows; }
  const tbody = $("members").querySelector("tbody");
  const rows = [];
  for (const m of members.members) {
    let clauses = el("span", {class: "muted"}, "–");
    try {
      const man = await manifestOf(m.name);
      clauses = el("span", {});
      for (const c of man.clauses || []) {
        clauses.append(el("span", {class: "clause-" + c.discharge, title: c.discharge + (c.substrate ? " (" + c.substrate + ")" : "")}, c.clause + (c.discharge === "Discharged" ? " ✓" : " ~")), " ");
      }
    } catch (e) { /* a member not in the table yet */ }
    // An unproven member is a gossip hint: anyone with the gossip key can
    // announce one; it is in no placement and its addresses are unverified.
    const identity = m.proven ? el("span", {class: "status-alive"}, "proven ✓") :
      el("span", {class: "warn", title: "has not proved its name with a certificate of the cluster CA: its addresses are unverified hints"}, "unproven");
    rows.push(el("tr", {"data-node": m.name, "data-status": m.status, "data-proven": String(!!m.proven)},
      el("td", {}, m.name), el("td", {class: "status-" + m.status}, m.status), el("td", {class: "identity"}, identity), el("td", {}, m.raft),
      el("td", {}, m.profile || "–"), el("td", {}, clauses), el("td", {class: "num"}, shards[m.name] ?? "–"),
      el("td", {class: "num"}, follows[m.name] ?? "–"), el("td", {}, m.address), el("td", {}, m.version || "–")));
  }
  tbody.replaceChildren(...rows);
  const alive = members.members.filter((m) => m.status === "alive").length;
  $("member-count").textContent = alive + " alive / " + members.members.length;
  const unproven = members.members.filter((m) => !m.proven).length;
  $("unproven-count").textContent = unproven + " unproven";
  $("unproven-count").hidden = unproven === 0;
  $("placement-summary").textContent = placement.standalone ? "standalone node: it owns every actor" :
    `epoch ${placement.epoch}, term ${placement.term}, ${placement.shard_count} shards × ${placement.groups} group(s), ` +
    `${placement.moving} moving, ${placement.unassigned} unassigned`;
  barChart($("shards-chart"), (placement.nodes || []).map((n) => ({label: n.name, value: n.shards, note: n.status})));
  drawReplication(placement);
  drawPolicies(placement);
}

// drawReplication shows the replica sets (their size, how many are short
// of it) and the answering node's followers with their lag.
function drawReplication(placement) {
  const summary = $("replication-summary");
  summary.replaceChildren();
  if (placement.standalone) {
    summary.textContent = "standalone node: no replicas";
  } else {
    const r = placement.replicas || 1;
    summary.append(r > 1 ? `replica sets of ${r} (the owner and ${r - 1} follower${r > 2 ? "s" : ""}), ` : "no replicas (replica sets of 1), ",
      el("span", {id: "under-replicated", class: placement.under_replicated ? "warn" : ""}, `${placement.under_replicated || 0} under-replicated`),
      " shard(s), ",
      el("span", {id: "below-replicas", class: placement.below_replicas ? "warn" : ""}, `${placement.below_replicas || 0} below ${r} copies`));
  }
  const rows = (placement.replication || []).map((f) => el("tr", {"data-follower": f.follower},
    el("td", {}, f.follower), el("td", {class: "num"}, f.shards),
    replicaState(f),
    el("td", {class: "num"}, f.queued_records), el("td", {class: "num"}, f.in_flight_records),
    el("td", {class: "num lag"}, f.lag_seconds > 0 ? fmtSeconds(f.lag_seconds) : "none"),
    el("td", {class: "num"}, f.last_ack_seconds < 0 ? "never" : fmtSeconds(f.last_ack_seconds) + " ago"),
    el("td", {class: "num"}, f.acked_records)));
  if (!rows.length) rows.push(el("tr", {}, el("td", {colspan: 8, class: "muted"}, "this node streams to no follower")));
  $("replication").querySelector("tbody").replaceChildren(...rows);
}

// replicaState is a follower's state as `tempest placement` words it: a
// follower in no set of this node's (one it still sends to) has left them.
function replicaState(f) {
  if (f.catching_up) return el("td", {class: "warn"}, "catching up");
  if (!f.shards) return el("td", {class: "warn"}, "left the sets");
  return el("td", {class: "status-alive"}, "in sync");
}

// drawPolicies shows, per kind, the policy digest the cluster agrees on,
// the nodes that publish it and those that publish another.
function drawPolicies(placement) {
  const short = (d) => el("code", {title: d}, d ? d.slice(0, 12) + "…" : "–");
  const rows = (placement.policies || []).map((p) => {
    const differ = el("span", {});
    for (const [node, d] of Object.entries(p.differ || {})) differ.append(el("span", {class: "warn"}, node + " "), short(d), " ");
    if (!differ.childNodes.length) differ.append(el("span", {class: "muted"}, "none"));
    const mine = state.policies[p.kind];
    const here = mine === undefined ? el("span", {class: "muted"}, "not hosted") :
      mine === p.digest ? el("span", {class: "status-alive"}, "agrees ✓") : el("span", {class: "warn"}, "differs: ", short(mine));
    return el("tr", {"data-kind": p.kind, "data-digest": p.digest},
      el("td", {}, p.kind), el("td", {class: "digest"}, short(p.digest)), el("td", {}, (p.agree || []).join(", ") || "–"),
      el("td", {}, differ), el("td", {}, here));
  });
  if (!rows.length) rows.push(el("tr", {}, el("td", {colspan: 5, class: "muted"}, placement.standalone ? "standalone node: no placement table" : "no kinds placed")));
  $("policies").querySelector("tbody").replaceChildren(...rows);
}

async function refreshKinds() {
  if (!state.kinds.length) {
    const body = await apiJSON("/v1/kinds");
    state.kinds = body.kinds;
    for (const p of body.policies || []) state.policies[p.kind] = p.digest;
    $("lookup-kind").replaceChildren(...state.kinds.map((k) => el("option", {value: k}, k)));
  }
  const now = Date.now();
  const metrics = parseMetrics(await api("/metrics"));
  state.samples.push({t: now, metrics});
  while (state.samples.length > 2 && now - state.samples[0].t > 60000) state.samples.shift();
  const prev = state.samples.length > 1 ? state.samples[state.samples.length - 2] : null;
  const window = state.samples.length > 1 ? state.samples[0] : null;
  if (prev) {
    const dt = (now - prev.t) / 1000;
    const rate = Math.max(0, (sum(metrics, "tempest_messages_total", {op: "ask"}) - sum(prev.metrics, "tempest_messages_total", {op: "ask"})) / dt);
    state.asks.push({t: now, rate});
    while (state.asks.length && now - state.asks[0].t > HISTORY_MS) state.asks.shift();
  }
  lineChart($("asks-chart"), state.asks, HISTORY_MS, now);
  const counts = await Promise.all(state.kinds.map((k) =>
    apiJSON("/v1/actors?limit=1&kind=" + encodeURIComponent(k)).then((b) => b.count, () => null)));
  const rows = state.kinds.map((k, i) => {
    const ev = (event) => sum(metrics, "tempest_actor_events_total", {kind: k, event});
    let asks = "–";
    if (prev) {
      const d = sum(metrics, "tempest_messages_total", {kind: k, op: "ask"}) - sum(prev.metrics, "tempest_messages_total", {kind: k, op: "ask"});
      asks = (Math.max(0, d) / ((now - prev.t) / 1000)).toFixed(1);
    }
    const q = (x) => fmtSeconds(quantile(x, metrics, window && window.metrics, "tempest_ask_duration_seconds", {kind: k}));
    return el("tr", {"data-kind": k}, el("td", {}, k), el("td", {class: "num"}, counts[i] ?? "–"),
      el("td", {class: "num"}, ev("Activated")), el("td", {class: "num"}, ev("Hydrated")), el("td", {class: "num"}, ev("Passivated")),
      el("td", {class: "num"}, sum(metrics, "tempest_messages_total", {kind: k, outcome: "refused"})),
      el("td", {class: "num"}, asks), el("td", {class: "num"}, q(0.5)), el("td", {class: "num"}, q(0.9)), el("td", {class: "num"}, q(0.99)));
  });
  $("kinds").querySelector("tbody").replaceChildren(...rows);
  $("node-totals").textContent = `node totals: ${sum(metrics, "tempest_turns_total")} turns, ` +
    `${sum(metrics, "tempest_refusals_total")} refusals by admission, ` +
    `${sum(metrics, "tempest_mail_refusals_total", {direction: "sent"})} refusals of other nodes' mail, ` +
    `${sum(metrics, "tempest_mail_refusals_total", {direction: "received"})} of this node's by other nodes, ` +
    `${sum(metrics, "tempest_undelivered_total")} undelivered, ` +
    `${sum(metrics, "tempest_asks_expired_total")} expired asks; latency quantiles over the last minute of asks through this node's gateway`;
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function barChart(root, bars) {
  const W = 420, H = 160, pad = 24;
  const max = Math.max(1, ...bars.map((b) => b.value));
  const bw = bars.length ? (W - 2 * pad) / bars.length : 0;
  const parts = [];
  bars.forEach((b, i) => {
    const h = (H - 2 * pad) * b.value / max;
    const x = pad + i * bw + bw * 0.15;
    parts.push(svg("rect", {class: "bar", x, y: H - pad - h, width: bw * 0.7, height: h, "data-node": b.label}));
    parts.push(svg("text", {x: x + bw * 0.35, y: H - pad + 14, "text-anchor": "middle"}, b.label));
    parts.push(svg("text", {x: x + bw * 0.35, y: H - pad - h - 4, "text-anchor": "middle"}, String(b.value)));
  });
  if (!bars.length) parts.push(svg("text", {x: W / 2, y: H / 2, "text-anchor": "middle"}, "no placement table"));
  root.replaceChildren(...parts);
}

function lineChart(root, points, spanMs, now) {
  const W = 420, H = 160, pad = 28;
  const max = Math.max(1, ...points.map((p) => p.rate));
  const x = (t) => pad + (W - 2 * pad) * (1 - (now - t) / spanMs);
  const y = (v) => H - pad - (H - 2 * pad) * v / max;
  const parts = [
    svg("line", {x1: pad, y1: H - pad, x2: W - pad, y2: H - pad, stroke: "#d9dee7"}),
    svg("text", {x: pad, y: pad - 8}, max.toFixed(0) + "/s"),
    svg("text", {x: pad, y: H - pad + 14}, "-" + Math.round(spanMs / 60000) + " min"),
    svg("text", {x: W - pad, y: H - pad + 14, "text-anchor": "end"}, "now"),
  ];
  if (points.length > 1) {
    parts.push(svg("polyline", {class: "line", points: points.map((p) => x(p.t).toFixed(1) + "," + y(p.rate).toFixed(1)).join(" ")}));
  } else {
    parts.push(svg("text", {x: W / 2, y: H / 2, "text-anchor": "middle"}, "collecting…"));
  }
  root.replaceChildren(...parts);
}

function actorPath(kind, key) {
  return "/v1/actors/" + encodeURIComponent(kind) + "/" + encodeURIComponent(key);
}

async function lookup() {
  const kind = $("lookup-kind").value, key = $("lookup-key").value;
  const st = await apiJSON(actorPath(kind, key));
  $("r-actor").textContent = st.kind + "/" + st.key;
  $("r-node").textContent = st.node || "–";
  $("r-state").textContent = st.state;
  $("r-incarnation").textContent = st.incarnation;
  $("r-active").textContent = st.active;
  $("lookup-result").hidden = false;
}

async function tick() {
  try {
    await Promise.all([refreshCluster(), refreshKinds()]);
    $("error").hidden = true;
    $("updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    $("error").textContent = e.message;
    $("error").hidden = false;
  }
  setTimeout(tick, POLL_MS);
}

$("lookup").addEventListener("submit", (ev) => {
  ev.preventDefault();
  lookup().catch((e) => { $("error").textContent = "lookup: " + e.message; $("error").hidden = false; });
});
$("passivate").addEventListener("click", async () => {
  const kind = $("lookup-kind").value, key = $("lookup-key").value;
  try {
    await api(actorPath(kind, key) + "/passivate", {method: "POST"});
    await lookup();
  } catch (e) {
    $("error").textContent = "passivate: " + e.message;
    $("error").hidden = false;
  }
});
tick();
