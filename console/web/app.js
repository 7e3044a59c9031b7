// The QMQ console: plain JavaScript, no library. Everything the cluster
// says is rendered with textContent, never as HTML.
"use strict";

let csrf = "";

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "onclick" || k === "onsubmit") e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

async function api(method, path, body) {
  const opts = { method, headers: { "Accept": "application/json" }, credentials: "same-origin" };
  if (method === "POST") {
    opts.headers["X-QMQ-CSRF"] = csrf || "none";
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body || {});
  }
  const r = await fetch("api/v1/" + path, opts);
  const data = await r.json().catch(() => ({ error: "answer is not JSON", code: "internal" }));
  if (r.status === 401) { showLogin(); }
  if (!r.ok) { const e = new Error(data.error || r.statusText); e.code = data.code; throw e; }
  return data;
}

const enc = encodeURIComponent;

function table(headers, rows, attrs) {
  return el("table", attrs || {}, el("tr", {}, ...headers.map(h => el("th", {}, h))),
    ...rows.map(r => el("tr", {}, ...r.map(c => el("td", {}, c)))));
}

function main(...children) {
  const m = document.getElementById("main");
  m.replaceChildren(...children.filter(c => c !== null && c !== undefined));
}

// refusal is an error as the page says it: a permission refused names
// what the application lacks (the cluster's words) and that it is a
// matter of rights.
function refusal(e) {
  const msg = String(e.message || e);
  return e.code === "permission_denied" ? "Not allowed for this application: " + msg : msg;
}

function errorBox(e) { return el("p", { class: "error", id: "error" }, refusal(e)); }

function sparkline(values) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("class", "spark"); svg.setAttribute("width", "120"); svg.setAttribute("height", "24");
  const max = Math.max(1, ...values);
  const pts = values.map((v, i) => `${values.length < 2 ? 0 : (i * 118 / (values.length - 1)) + 1},${23 - (v * 22 / max)}`);
  const pl = document.createElementNS(ns, "polyline");
  pl.setAttribute("points", pts.join(" "));
  svg.append(pl);
  return svg;
}

// bytes is a byte count for people: 1.5 GiB.
function bytes(n) {
  if (n === undefined || n === null || n === "") return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
  let i = 0, v = Number(n);
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i ? v.toFixed(1) : String(v)) + " " + units[i];
}

// snapshot is a node's newest snapshot as its status says: index, term, time.
function snapshot(s) {
  if (!s) return "";
  return s.last_snapshot_index ? `${s.last_snapshot_index} (term ${s.last_snapshot_term}) ${s.last_snapshot_at || ""}` : "none";
}

function tlsState(tls, insecure) { return tls ? "yes" : (insecure ? "insecure" : "no"); }

async function pageCluster() {
  const [c, h] = await Promise.all([api("GET", "cluster"), api("GET", "history")]);
  const series = (f) => h.points.map(f);
  const last = h.points.length ? h.points[h.points.length - 1] : null, rates = (last && last.rates) || {};
  const metaLeader = c.meta_nodes.map(n => n.status).find(s => s && s.state === "Leader");
  const parts = [el("h2", {}, "Cluster health"),
    el("p", {}, `Metaserver leader ${c.meta.leader || "?"}, term ${c.meta.term}, commit ${c.meta.commit_index}, applied ${c.meta.applied_index}; ${c.subjects} subjects; TLS ${c.meta.tls ? "on" : "off"}${c.meta.insecure ? " (insecure)" : ""}`),
    last ? el("p", {}, "Total lag ", sparkline(series(p => p.total_lag)), " ", last.total_lag, "; sends a second ",
      sparkline(series(p => p.total_rate || 0)), " ", (last.total_rate || 0).toFixed(1), ` (sampled every ${h.every}, the last hour)`)
      : el("p", {}, `Total lag and sends a second: not sampled yet (the first sample is under way; every ${h.every} from now on)`),
    Object.keys(rates).length ? table(["Subject", "Sends a second", ""], Object.entries(rates).sort((x, y) => y[1] - x[1]).map(([sub, r]) =>
      [el("a", { href: "#groups?subject=" + enc(sub) }, sub), sparkline(series(p => (p.rates || {})[sub] || 0)), r.toFixed(1)]), { id: "rates-table" }) : null,
    el("h3", {}, "Metaserver group"),
    table(["Node", "Address", "State", "Term", "Commit", "Applied", "Lag", "Last snapshot", "Disk free", "TLS", "Error"],
      c.meta_nodes.map(n => { const s = n.status;
        if (!s) return [n.id, n.addr, "", "", "", "", "", "", "", "", n.error || ""];
        return [n.id, n.addr, s.state, s.term, s.commit_index, s.applied_index, metaLeader ? Math.max(0, metaLeader.applied_index - s.applied_index) : "",
          snapshot(s), bytes(s.disk_free), tlsState(s.tls, s.insecure), ""]; }), { id: "meta-nodes" })];
  for (const g of c.broker_groups) {
    parts.push(el("h3", {}, `Broker group ${g.name}`),
      el("p", {}, `leader ${g.leader || "none"}, term ${g.term}, ${g.writable ? "writable" : "drained"}, ${g.available ? "available" : "unavailable"}, ${g.subjects} subjects, backlog `,
        sparkline(series(p => p.broker_groups[g.name] || 0))),
      table(["Node", "Address", "State", "Term", "Commit", "Applied", "Lag", "Backlog", "Last snapshot", "Disk free", "TLS", "Error"],
        g.nodes.map((n, i) => { const ns = g.node_status[i] || {}, s = ns.status;
          return [n.id, n.client_addr, n.state, n.term, s ? s.commit_index : "", n.applied_index, n.lag, n.backlog, snapshot(s), s ? bytes(s.disk_free) : "",
            tlsState(n.tls, n.insecure), ns.error || ""]; }), { class: "broker-nodes", "data-group": g.name }));
  }
  main(...parts);
}

async function pageSubjects(params) {
  const q = params.get("q") || "", offset = Number(params.get("offset") || 0), limit = 100;
  const s = await api("GET", `subjects?q=${enc(q)}&offset=${offset}&limit=${limit}`);
  const form = el("form", { id: "subject-search", onsubmit: (ev) => { ev.preventDefault(); location.hash = "subjects?q=" + enc(form.q.value); } },
    el("input", { name: "q", placeholder: "prefix", value: q }), el("button", { type: "submit" }, "Search"));
  const rows = s.subjects.map(r => [el("a", { href: "#groups?subject=" + enc(r.subject) }, r.subject),
    (r.groups || []).map(g => g.name).join(", "), (r.consumer_groups || []).join(", ")]);
  const nav = el("p", {}, `${s.total} subjects; showing ${s.offset + 1}–${s.offset + s.subjects.length} `,
    offset > 0 ? el("a", { href: `#subjects?q=${enc(q)}&offset=${Math.max(0, offset - limit)}` }, "previous") : null, " ",
    offset + limit < s.total ? el("a", { href: `#subjects?q=${enc(q)}&offset=${offset + limit}` }, "next") : null);
  main(el("h2", {}, "Subjects"), form, nav, table(["Subject", "Broker groups", "Consumer groups"], rows));
}

function confirmed(what) { return window.confirm(what); }

// age is a duration in milliseconds for people: 3h 2m, 41s.
function age(ms) {
  let s = Math.floor(Number(ms || 0) / 1000);
  const d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60);
  s %= 60;
  return d ? `${d}d ${h}h` : h ? `${h}h ${m}m` : m ? `${m}m ${s}s` : `${s}s`;
}

async function pageGroups(params) {
  const subject = params.get("subject"), q = params.get("q") || "", offset = Number(params.get("offset") || 0), limit = 100;
  const [sv, gs] = await Promise.all([api("GET", `subjects/${enc(subject)}`),
    api("GET", `subjects/${enc(subject)}/consumer-groups?q=${enc(q)}&offset=${offset}&limit=${limit}`)]);
  const here = `#groups?subject=${enc(subject)}&q=${enc(q)}`;
  const form = el("form", { id: "group-search", onsubmit: (ev) => { ev.preventDefault(); location.hash = `groups?subject=${enc(subject)}&q=` + enc(form.q.value); } },
    el("input", { name: "q", placeholder: "prefix", value: q }), el("button", { type: "submit" }, "Search"));
  const rows = gs.consumer_groups.map(v => [el("a", { href: `#group?subject=${enc(subject)}&group=${enc(v.group)}` }, v.group),
    v.total.lag, v.total.backlog, v.total.unacked, v.total.retrying, v.total.dead_letters, v.total.consumers]);
  const nav = el("p", {}, `${gs.total} consumer groups; showing ${gs.consumer_groups.length ? gs.offset + 1 : 0}–${gs.offset + gs.consumer_groups.length} `,
    offset > 0 ? el("a", { href: `${here}&offset=${Math.max(0, offset - limit)}` }, "previous") : null, " ",
    offset + limit < gs.total ? el("a", { href: `${here}&offset=${offset + limit}` }, "next") : null);
  main(el("h2", {}, `Consumer groups of ${subject}`),
    el("p", {}, el("a", { href: `#messages?subject=${enc(subject)}` }, "Browse its messages")),
    el("p", { id: "subject-rate" }, `${sv.last_window} appended in the last ${sv.rate_window}, ${sv.per_second.toFixed(2)} a second`),
    table(["Broker group", "Writable", "Available", `Appended in the last ${sv.rate_window}`, "Per second", "Retained since", "Error"],
      sv.broker_groups.map(g => [g.broker_group, g.writable ? "yes" : "drained", g.available ? "yes" : "no", g.last_window,
        g.per_second.toFixed(2), g.retained_since || "nothing retained", g.error || ""]), { id: "subject-table" }),
    gs.error ? el("p", { class: "error" }, gs.error) : null, form, nav,
    table(["Group", "Lag", "Backlog", "In flight", "Retrying", "Dead letters", "Consumers"], rows, { id: "groups-table" }));
}

async function pageGroup(params) {
  const subject = params.get("subject"), group = params.get("group");
  const path = `subjects/${enc(subject)}/consumer-groups/${enc(group)}`;
  // Asking for the history with the group makes the console sample its
  // lag from now on, whatever it owes (not only the groups owing most).
  // The chart is not worth the page: a history refused shows an empty one.
  const [v, h] = await Promise.all([api("GET", path),
    api("GET", `history?subject=${enc(subject)}&group=${enc(group)}`).catch(() => ({ every: "10s", points: [] }))]);
  const key = subject + "/" + group;
  const lags = h.points.map(p => (p.watched || {})[key] ?? p.consumer_groups[key]).filter(l => l !== undefined);
  const st = el("p", { id: "action-result" });
  const act = async (what, sub, body) => {
    if (!confirmed(what)) return;
    try { const r = await api("POST", path + sub, body); st.className = "ok"; st.textContent = "Done: " + JSON.stringify(r); }
    catch (e) { st.className = "error"; st.textContent = refusal(e); }
  };
  const reset = el("form", { id: "reset-form", onsubmit: (ev) => { ev.preventDefault();
      const to = reset.to.value, body = { to }; if (to === "time") body.at = new Date(reset.at.value).toISOString();
      act(`Reset ${group} of ${subject} to ${to}?`, "/reset", body); } },
    el("select", { name: "to" }, el("option", {}, "latest"), el("option", {}, "earliest"), el("option", {}, "time")),
    el("input", { name: "at", type: "datetime-local" }), el("button", { type: "submit" }, "Reset"));
  const s = v.total.settings;
  const set = el("form", { id: "set-form", onsubmit: (ev) => { ev.preventDefault();
      const body = {};
      for (const k of ["max_deliveries", "max_in_flight"]) if (set[k].value) body[k] = Number(set[k].value);
      for (const k of ["ack_wait", "retry_first", "retry_max", "idle_expiry"]) if (set[k].value) body[k] = set[k].value;
      if (set.start.value) body.start = set.start.value;
      act(`Change the settings of ${group} of ${subject}?`, "/set", body); } },
    el("label", {}, "max deliveries ", el("input", { name: "max_deliveries", placeholder: String(s.max_deliveries) })),
    el("label", {}, "max in flight ", el("input", { name: "max_in_flight", placeholder: s.max_in_flight ? String(s.max_in_flight) : "broker default" })),
    ...["ack_wait", "retry_first", "retry_max", "idle_expiry"].map(k => el("label", {}, k.replace("_", " ") + " ", el("input", { name: k, placeholder: (s[k] / 1e9) + "s" }))),
    el("label", { title: "where a broker group new to the group starts it" }, "start in a new broker group ",
      el("select", { name: "start" }, el("option", { value: "" }, "not given (latest)"), el("option", {}, "latest"), el("option", {}, "earliest"))),
    el("button", { type: "submit" }, "Set"));
  main(el("h2", {}, `${group} of ${subject}`),
    el("p", { id: "group-lag", "data-samples": String(lags.length) }, "Lag ", sparkline(lags), ` ${v.total.lag} now (sampled every ${h.every} since this page was first opened, the last hour)`),
    el("p", {}, el("a", { href: `#dead?subject=${enc(subject)}&group=${enc(group)}` }, `Dead letters (${v.total.dead_letters})`)),
    v.settings_differ ? el("p", { class: "error" }, "The broker groups hold different settings: set them again.") : null,
    table(["Broker group", "Lag", "Backlog", "In flight", "Due again", "Retrying", "Dead letters", "Consumers", "Cursor", "End", "Max deliveries", "Ack wait"],
      [...v.broker_groups, v.total].map(g => [g.broker_group || "total", g.lag, g.backlog, g.unacked, g.redeliver, g.retrying, g.dead_letters, g.consumers, g.cursor, g.end, g.settings.max_deliveries, (g.settings.ack_wait / 1e9) + "s"]), { id: "group-table" }),
    el("h3", {}, "Backlog by age and retention"),
    table(["Broker group", "Oldest not handed out", "Its age", "Retained since", "Error"],
      (v.ages || []).map(a => [a.broker_group, a.oldest_pending_at || "none", a.oldest_pending_at ? age(a.oldest_pending_age_ms) : "", a.retained_since || "nothing retained", a.error || ""]), { id: "ages-table" }),
    el("h3", {}, "Consumers"),
    table(["Broker group", "Consumer", "In flight", "Last heard from"],
      v.broker_groups.flatMap(g => (g.members || []).map(m => [g.broker_group, m.name, m.in_flight,
        m.seen_ms < 0 ? "not since this leader took over" : age(m.seen_ms) + " ago"])), { id: "consumers-table" }),
    el("h3", {}, "Reset"), reset, el("h3", {}, "Settings"), set, st);
}

async function pageDead(params) {
  const subject = params.get("subject"), group = params.get("group"), offset = Number(params.get("offset") || 0);
  const path = `subjects/${enc(subject)}/consumer-groups/${enc(group)}/dead-letters`;
  const d = await api("GET", `${path}?offset=${offset}&limit=100`);
  const st = el("p", { id: "action-result" });
  const act = async (what, op, body) => {
    if (!confirmed(what)) return;
    try { const r = await api("POST", `${path}/${op}`, body); st.className = "ok"; st.textContent = "Done: " + r.broker_groups.map(x => `${x.broker_group}: ${x.done}`).join(", "); }
    catch (e) { st.className = "error"; st.textContent = refusal(e); }
  };
  const parts = [el("h2", {}, `Dead letters of ${group} of ${subject}`), d.error ? el("p", { class: "error" }, d.error) : null,
    el("p", {}, el("button", { id: "resend-all", onclick: () => act(`Resend every dead letter of ${group}?`, "resend", { all: true }) }, "Resend all"), " ",
      el("button", { id: "purge-all", onclick: () => act(`Purge every dead letter of ${group} for good?`, "purge", { all: true }) }, "Purge all"), " ",
      el("a", { id: "export-dead", href: `api/v1/${path}/export?offset=${offset}&limit=1000`, download: "" }, "Export as JSON lines (at most 1,000, with bodies)"))];
  for (const p of d.broker_groups) {
    const boxes = [];
    const rows = p.letters.map(l => { const b = el("input", { type: "checkbox", class: "dead-box", value: String(l.seq) }); boxes.push(b);
      return [b, l.seq, l.id ? el("a", { class: "dead-id", href: `#messages?id=${enc(l.id)}` }, l.id) : "", l.deliveries, l.at, l.size, (l.tags || []).join(", "), l.removed ? "removed" : "",
        el("button", { class: "resend-one", onclick: () => act(`Resend dead letter ${l.seq}?`, "resend", { broker_group: p.broker_group, seqs: [l.seq] }) }, "Resend")]; });
    const sel = () => boxes.filter(b => b.checked).map(b => Number(b.value));
    const all = el("input", { type: "checkbox", class: "select-all", title: "select every dead letter of this page",
      onclick: () => { for (const b of boxes) b.checked = all.checked; } });
    parts.push(el("h3", {}, `Broker group ${p.broker_group}: ${p.total}`),
      table([all, "Seq", "Message", "Deliveries", "Died", "Size", "Tags", "", ""], rows),
      el("p", {}, el("button", { class: "resend-selected", onclick: () => { const s = sel(); if (s.length) act(`Resend ${s.length} dead letters of broker group ${p.broker_group}?`, "resend", { broker_group: p.broker_group, seqs: s }); } }, "Resend selected"), " ",
        el("button", { class: "purge-selected", onclick: () => { const s = sel(); if (s.length) act(`Purge ${s.length} dead letters of broker group ${p.broker_group} for good?`, "purge", { broker_group: p.broker_group, seqs: s }); } }, "Purge selected")));
  }
  parts.push(el("p", {}, offset > 0 ? el("a", { href: `#dead?subject=${enc(subject)}&group=${enc(group)}&offset=${Math.max(0, offset - 100)}` }, "previous") : null, " ",
    d.broker_groups.some(p => offset + 100 < p.total) ? el("a", { href: `#dead?subject=${enc(subject)}&group=${enc(group)}&offset=${offset + 100}` }, "next") : null), st);
  main(...parts);
}

// pageDelays shows each broker group's delayed messages by hour, and by
// subject the 100 with the most pending (all with ?all=1): a table of
// thousands of subjects takes the browser a second to lay out.
async function pageDelays(params) {
  const all = params.get("all") === "1";
  const d = await api("GET", "delays");
  const parts = [el("h2", {}, "Delayed messages")];
  for (const g of d.broker_groups) {
    const subjects = Object.entries(g.subjects || {}).sort((x, y) => y[1] - x[1] || (x[0] < y[0] ? -1 : 1));
    const shown = all ? subjects : subjects.slice(0, 100), rest = subjects.slice(shown.length);
    parts.push(el("h3", {}, `Broker group ${g.group}: ${g.pending} pending (node ${g.node})`),
      table(["Hour (UTC)", "Pending"], (g.hours || []).map(h => [h.hour, h.pending])),
      table(["Subject", "Pending"], shown.map(([s, n]) => [s, n]), { class: "delay-subjects", "data-group": g.group }),
      rest.length ? el("p", {}, `and ${rest.length} more subjects with ${rest.reduce((t, [, n]) => t + n, 0)} pending: `,
        el("a", { class: "all-subjects", href: "#delays?all=1" }, "show all")) : null);
  }
  main(...parts);
}

// bodyText is a stored body (base64 in the API) as text when it is UTF-8.
function bodyText(b64) {
  const bin = atob(b64 || "");
  const bytes = Uint8Array.from(bin, c => c.charCodeAt(0));
  try { return new TextDecoder("utf-8", { fatal: true }).decode(bytes); }
  catch (e) { return "(base64) " + (b64 || ""); }
}

// eventDetail is what a timeline event says besides its kind, group,
// consumer and delivery: who sent or acted, from where, when it is due.
function eventDetail(e) {
  const parts = [];
  if (e.app) parts.push("app " + e.app);
  if (e.client_address) parts.push("from " + e.client_address);
  if (e.due) parts.push((e.kind === "sent" ? "deliver at " : e.kind === "nacked" ? "retry at " : "due ") + e.due);
  return parts.join(", ");
}

// storedMessage shows one message found by id: where it is stored, its
// properties and body, and its timeline.
function storedMessage(m) {
  const rows = [["Broker group", m.broker_group], ["Subject", m.subject], ["Sequence", m.seq], ["Offset", m.offset],
    ["Size", m.size], ["Raft index", m.raft_index], ["Created", m.created_at], ["Appended", m.appended_at]];
  if (m.tags && m.tags.length) rows.push(["Tags", m.tags.join(", ")]);
  if (m.key) rows.push(["Key", m.key]);
  for (const p of m.properties || []) rows.push(["Property " + p.key, p.value]);
  rows.push(["Body", m.body_omitted ? `(${m.body_size} bytes, left out: the answer had no room)` : bodyText(m.body)]);
  const tl = m.timeline || [];
  return el("section", { class: "message" }, el("h3", {}, `Message ${m.id} of ${m.subject}`),
    table(["Field", "Value"], rows),
    el("h4", {}, "Timeline"),
    tl.length ? table(["Time", "Event", "Group", "Consumer", "Delivery", "Raft index", "Detail"],
      tl.map(e => [e.at, e.kind, e.consumer_group || "", e.consumer || "", e.delivery || "", e.raft_index, eventDetail(e)])) :
      el("p", {}, "No events recorded."),
    m.timeline_more ? el("p", {}, "More events after these: a lookup answers at most 1,000, and fewer when its reply is full.") : null,
    m.timeline_error ? el("p", {class: "error"}, "The timeline could not be read: " + m.timeline_error) : null);
}

// browseKeys are a listing's parameters, kept in the page's hash
// (#messages?subject=S&...), so that a listing can be linked, reloaded and
// paged: the "next" link under a broker group's table continues it there.
const browseKeys = ["since", "until", "broker_group", "from_seq", "tag", "key", "property", "limit"];

async function pageMessages(params) {
  const id = params.get("id") || "";
  const subject = params.get("subject") || "";
  const query = new URLSearchParams();
  for (const k of browseKeys) { if (params.get(k)) query.set(k, params.get(k)); }
  const out = el("div", { id: "message-result" });
  const show = async (subject, q) => {
    try {
      const r = await api("GET", "subjects/" + enc(subject) + "/messages?" + q.toString());
      const parts = [el("p", {}, el("a", { id: "export-messages", href: "api/v1/subjects/" + enc(subject) + "/messages/export?" + q.toString(), download: "" },
        "Export this listing as JSON lines (at most the limit, 1,000 by default, 10,000 at most)"))];
      if (r.error) parts.push(el("p", { class: "error" }, r.error));
      for (const p of r.pages) {
        parts.push(el("h3", {}, `Broker group ${p.broker_group}: ${p.messages.length} messages` + (p.truncated ? " (the scan budget ran out: narrow the window)" : "") +
          (p.next >= 0 ? `, more from sequence ${p.next}` : "")),
          table(["Seq", "Appended", "Message", "Tags", "Key", "Size"], p.messages.map(m => [m.seq, m.appended_at,
            el("a", { href: "#messages?id=" + enc(m.id) }, m.id), (m.tags || []).join(", "), m.key || "", m.size]), { class: "browse-table" }));
        if (p.next >= 0) {
          // The next page of this broker group: the same listing from its
          // next sequence (sequences are per broker group; since gives way).
          const nq = new URLSearchParams(q);
          nq.delete("since"); nq.set("broker_group", p.broker_group); nq.set("from_seq", String(p.next));
          parts.push(el("p", {}, el("a", { class: "next-page", href: `#messages?subject=${enc(subject)}&${nq.toString()}` }, `next (from sequence ${p.next})`)));
        }
      }
      out.replaceChildren(...parts);
    } catch (e) { out.replaceChildren(errorBox(e)); }
  };
  const lookup = async (id) => {
    try {
      const r = await api("GET", "messages/" + enc(id) + "?body=1");
      out.replaceChildren(...(r.messages.length ? r.messages.map(storedMessage) : [el("p", { id: "not-found" }, `No retained message has the id ${id}.`)]));
    } catch (e) { out.replaceChildren(errorBox(e)); }
  };
  const form = el("form", { id: "message-form", onsubmit: (ev) => { ev.preventDefault();
      const h = "messages?id=" + enc(form.id.value);
      if (location.hash.slice(1) === h) lookup(form.id.value); else location.hash = h; } },
    el("input", { name: "id", placeholder: "message id", value: id }), el("button", { type: "submit" }, "Look up"));
  const browse = el("form", { id: "browse-form", onsubmit: (ev) => { ev.preventDefault();
      const q = new URLSearchParams();
      for (const k of browseKeys) { if (browse[k].value) q.set(k, browse[k].value); }
      const h = `messages?subject=${enc(browse.subject.value)}` + (q.size ? "&" + q.toString() : "");
      if (location.hash.slice(1) === h) show(browse.subject.value, q); else location.hash = h; } },
    el("input", { name: "subject", placeholder: "subject", value: subject }),
    ...[["since", "since (90m or RFC 3339; empty: the first)"], ["until", "until (exclusive)"], ["broker_group", "broker group"],
      ["from_seq", "from sequence (with a broker group)"], ["tag", "tag"], ["key", "key"], ["property", "property: NAME=VALUE"], ["limit", "limit (100)"]]
      .map(([k, ph]) => el("input", { name: k, placeholder: ph, value: query.get(k) || "" })),
    el("button", { type: "submit" }, "Browse"));
  main(el("h2", {}, "Messages"),
    el("p", {}, "Read where they are stored, never consumed: a message by id in every broker group, with what happened to it, or a subject's by time, tag and key."),
    form, browse, out);
  if (id) await lookup(id);
  else if (subject) await show(subject, query);
}

const pages = { cluster: pageCluster, subjects: pageSubjects, groups: pageGroups, group: pageGroup, dead: pageDead, delays: pageDelays, messages: pageMessages };

async function route() {
  const [name, query] = (location.hash.slice(1) || "cluster").split("?");
  const page = pages[name] || pageCluster;
  document.getElementById("login").hidden = true;
  try { await page(new URLSearchParams(query || "")); }
  catch (e) { if (e.code !== "unauthenticated") main(errorBox(e)); }
}

function showLogin() {
  main();
  document.getElementById("login").hidden = false;
}

async function start() {
  window.addEventListener("hashchange", route);
  document.getElementById("login-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const f = ev.target;
    try {
      const s = await api("POST", "login", { code: f.code.value, secret: f.secret.value });
      csrf = s.csrf; f.secret.value = "";
      document.getElementById("who").textContent = s.app;
      route();
    } catch (e) { document.getElementById("login-error").textContent = e.message; }
  });
  try {
    const s = await api("GET", "session");
    csrf = s.csrf || "none";
    document.getElementById("who").textContent = s.app || "";
  } catch (e) { return; }
  route();
}

start();
