// evobus ui: the campaign list at /, a campaign's live page at /campaign/<id>. The server
// sends the page's whole view (ui/view.py's CampaignView) as Server-Sent Events on every
// change; this module draws it.

import { LineChart, bars, legend } from "./charts.js";
import { PALETTE, clock, count, fill, h, left, score, seconds, table, text } from "./dom.js";
import { LineageView } from "./lineage.js";
import { candidateSteering, renderSteering, steeringBar } from "./steering.js";

const STAGE_ORDER = ["diagnose", "propose", "repair", "evaluate"];
const STALE_COLORS = { keep: PALETTE[0], discard: PALETTE[1], repair: PALETTE[2], repaired: PALETTE[3], repair_discarded: PALETTE[4] };
const ENDED = ["completed", "failed"]; // a campaign that sends no more events
const STATES = ["accepted", "rejected", "filtered", "evaluated", "proposed"];
const SHOWN_ROWS = 200; // candidates listed at once (the view holds up to 1,000 to filter)

const parts = location.pathname.split("/").filter(Boolean);
if (parts[0] === "campaign" && parts[1]) {
  campaignPage(decodeURIComponent(parts[1]));
} else {
  listPage();
}

// --- the list ------------------------------------------------------------------------

async function listPage() {
  document.title = "evobus: campaigns";
  text("title", "campaigns");
  const main = document.getElementById("main");
  const refresh = async () => {
    let answer;
    try {
      answer = await (await fetch("/api/campaigns")).json();
      text("connection", "");
    } catch (error) {
      text("connection", `the server does not answer (${error})`);
      return;
    }
    const where = [answer.bus ? `the bus ${answer.bus}` : "", `the run folders under ${answer.out}`].filter(Boolean).join(" and ");
    const rows = answer.campaigns.map((c) => [
      h("a", { href: `/campaign/${encodeURIComponent(c.id)}` }, c.id),
      c.task || "",
      h("span", {}, h("span", { class: `badge ${c.status || "running"}` }, c.status || (c.finished ? "finished" : "running")),
        c.resume ? h("div", { class: "note" }, "resume it: ", h("code", {}, c.resume)) : null),
      score(c.best_score),
      c.proposals === null ? "" : count(c.proposals),
      [c.on_bus ? "bus" : "", c.in_folder ? "folder" : ""].filter(Boolean).join(" + "),
      c.modified ? new Date(c.modified * 1000).toLocaleString("en-GB") : "",
    ]);
    // replaceChildren, unlike h(), would show a null as the text "null".
    main.replaceChildren(...[
      h("h2", {}, "Campaigns"),
      h("p", { class: "note" }, `From ${where}.`),
      answer.note ? h("p", { class: "note warn" }, answer.note) : null,
      rows.length
        ? table(["campaign", "task", "status", "best", "proposals", "found on", "last event"], rows, { numeric: [3, 4] })
        : h("p", {}, "No campaign yet: `evobus run CAMPAIGN.toml --ui` starts one with this page beside it."),
    ].filter(Boolean));
  };
  await refresh();
  setInterval(refresh, 5000);
}

// --- a campaign ----------------------------------------------------------------------

function campaignPage(cid) {
  document.title = `evobus: ${cid}`;
  text("title", cid);
  const state = { cid, selected: null, selectedState: "", view: null, out: "runs", best: null,
    filter: { state: "", operator: "", error: "", search: "" } };
  layout(state);
  steeringBar(state);
  state.tree = new LineageView(document.getElementById("lineage"), (id) => showCandidate(state, id));
  fetch("/api/campaigns").then((r) => r.json()).then((a) => { state.out = a.out; }).catch(() => {});
  const charts = {
    time: new LineChart(document.getElementById("chart-time"), { xLabel: "seconds since start", yLabel: "score" }),
    evals: new LineChart(document.getElementById("chart-evals"), { xLabel: "evaluations", yLabel: "score" }),
    rates: new LineChart(document.getElementById("chart-rates"), { xLabel: "seconds since start", yLabel: "items / minute", format: (v) => v.toFixed(1) }),
    queues: new LineChart(document.getElementById("chart-queues"), { xLabel: "seconds since start", yLabel: "items", format: (v) => String(v) }),
  };
  const source = new EventSource(`/api/campaigns/${encodeURIComponent(cid)}/stream`);
  source.addEventListener("open", () => text("connection", "live"));
  source.addEventListener("error", () => {
    const done = state.view && ENDED.includes(state.view.status);
    text("connection", done
      ? `the server stopped; the campaign has ended (evobus ui --campaign ${cid} shows it again)`
      : "connection lost, reconnecting…");
  });
  source.addEventListener("view", (message) => {
    const { view, source: from, note } = JSON.parse(message.data);
    state.view = view;
    render(view, from, note, charts, state);
    if (ENDED.includes(view.status) || view.status === "interrupted") {
      // An ended or interrupted campaign sends nothing more: closing the stream lets the page
      // finish loading (a headless browser's screenshot or print waits for that).
      source.close();
      text("connection", view.status === "interrupted" ? "not live: reload once it is resumed" : "ended");
    }
  });
}

function section(title, ...children) {
  return h("section", {}, h("h2", {}, title), ...children);
}

function card(label, id, subId) {
  return h("div", { class: "card" },
    h("div", { class: "label" }, label),
    h("div", { class: "value", id }, "n/a"),
    subId ? h("div", { class: "sub", id: subId }, "") : null);
}

function layout(state) {
  const filter = (key, label) => h("label", {}, `${label} `, h("select", { id: `filter-${key}`,
    onchange: (e) => { state.filter[key] = e.target.value; renderCandidates(state); } }, h("option", { value: "" }, "any")));
  document.getElementById("main").replaceChildren(
    h("p", { class: "note", id: "about" }, ""),
    h("p", { class: "note warn", id: "feed-note" }, ""),
    h("div", { class: "resume", id: "resume", hidden: true }),
    h("section", { class: "steering", id: "steering", hidden: true }),
    h("section", { id: "steering-log-section", hidden: true }, h("h2", {}, "Steered"), h("div", { id: "steering-log" })),
    h("div", { class: "cards" },
      card("best score (validated)", "best-score", "best-candidate"),
      card("seed score", "seed-score", "splits"),
      card("proposals", "proposals", "proposals-budget"),
      card("evaluations", "evaluations", "evaluations-left"),
      card("accepted", "accepted", "pool"),
      card("model calls", "model-calls", "tokens"),
      card("running time", "elapsed", "phase")),
    section("Best program", h("div", { id: "best" }, h("p", { class: "note" }, "No candidate validated yet."))),
    section("Budget left", h("div", { id: "budget" })),
    section("Best score",
      h("div", { class: "grid2" },
        h("div", {}, h("h3", {}, "over time"), h("div", { class: "chart", id: "chart-time" })),
        h("div", {}, h("h3", {}, "over evaluations"), h("div", { class: "chart", id: "chart-evals" }))),
      h("p", { class: "note" }, "Validated best (step), the pool's best train mean and the pool mean, from the progress events; dots: validations and accepted children's minibatch scores.")),
    section("Stages",
      h("div", { id: "stages-now" }),
      h("div", { class: "grid2" },
        h("div", {}, h("h3", {}, "throughput"), h("div", { class: "chart", id: "chart-rates" })),
        h("div", {}, h("h3", {}, "queued (solid) and in flight (dotted)"), h("div", { class: "chart", id: "chart-queues" })))),
    h("div", { class: "grid2" },
      section("Staleness", h("div", { id: "staleness" })),
      section("Operators", h("div", { id: "operators" }))),
    section("Lineage",
      h("div", { class: "layout" },
        h("div", {},
          h("div", { class: "tree", id: "lineage" }),
          h("p", { class: "note" }, "Accepted candidates (filled), their ancestors (hollow), the seed (square) and the validated best (star) with its ancestry in red, by generation; a node's size is its score. Click a node or a row for its diff, diagnosis, scores per instance and evidence."),
          h("h3", {}, "failures by error"),
          h("div", { id: "failures" }),
          h("h3", {}, "candidates"),
          h("div", { class: "filters" }, filter("state", "state"), filter("operator", "operator"), filter("error", "error"),
            h("input", { type: "search", id: "filter-search", placeholder: "search id, parent, error…",
              oninput: (e) => { state.filter.search = e.target.value.trim().toLowerCase(); renderCandidates(state); } }),
            h("span", { class: "note", id: "candidates-count" }, "")),
          h("div", { class: "scroll", id: "candidates" })),
        h("div", { class: "panel", id: "candidate" }, h("p", { class: "note" }, "Pick a candidate.")))),
    h("div", { class: "grid2" },
      section("Skills", h("div", { class: "scroll", id: "skills" })),
      section("Agents", h("div", { id: "agents" }))),
    h("p", { class: "note", id: "footer" }, ""),
  );
}

function render(view, from, note, charts, state) {
  const n = view.numbers;
  const status = document.getElementById("status");
  status.textContent = view.paused && view.status === "running" ? "paused" : view.status;
  status.className = `badge ${view.status}`;
  text("about", [view.task && `task ${view.task}`, view.engine && `engine: ${view.engine}`,
    view.stop_reason && `stopped: ${view.stop_reason}`].filter(Boolean).join(" · "));
  text("feed-note", note || "");
  renderResume(view, state);
  renderSteering(view);
  text("best-score", n.best_score_text);
  text("best-candidate", n.best_candidate || "");
  text("seed-score", n.seed_score_text);
  text("splits", view.splits);
  text("proposals", count(n.proposals));
  text("proposals-budget", view.budget.proposals !== null ? `budget ${count(view.budget.proposals)}` : "");
  text("evaluations", count(n.evaluations));
  text("evaluations-left", view.budget.evaluations_left !== null && view.budget.evaluations_left >= 0 ? `${count(view.budget.evaluations_left)} left` : "");
  text("accepted", count(n.accepted));
  text("pool", `pool ${n.pool_size}, version ${n.pool_version}`);
  text("model-calls", count(n.model_calls));
  text("tokens", `${count(n.tokens)} tokens` + (n.tokens_per_second ? `, ${n.tokens_per_second.toFixed(0)} tok/s` : ""));
  text("elapsed", seconds(n.elapsed));
  text("phase", n.phase);
  renderBest(view, state);
  renderBudget(view);
  renderScores(view, charts);
  renderStages(view, charts);
  renderStaleness(view);
  renderOperators(view);
  renderLineage(view, state);
  renderSkills(view);
  renderAgents(view);
  text("footer", `${count(view.events)} events from ${from === "bus" ? "the bus (EVO_EVENTS)" : from === "folder" ? "the run folder's events.jsonl" : "nowhere yet"}; last at ${clock(view.last_at)}.`);
}

function renderBudget(view) {
  const b = view.budget;
  const rows = [
    ["proposals", left(b.proposals_left), b.proposals, b.proposals_left],
    ["evaluations", left(b.evaluations_left), null, b.evaluations_left],
    ["model tokens", left(b.tokens_left), null, b.tokens_left],
    ["wall clock", left(b.seconds_left, "s"), b.wall_seconds, b.seconds_left],
  ].map(([what, shown, total, remaining]) => [
    what, shown,
    total && remaining !== null && remaining >= 0
      ? h("span", { class: "meter" }, h("span", { style: `width: ${Math.max(0, Math.min(100, (100 * remaining) / total)).toFixed(1)}%` }))
      : "",
  ]);
  fill("budget", table(["budget", "left", ""], rows, { numeric: [1] }));
}

function renderScores(view, charts) {
  const s = view.scores;
  const lines = [
    { label: "validated best", values: s.best, color: PALETTE[3], stepped: true, width: 2 },
    { label: "best train mean", values: s.train, color: PALETTE[1] },
    { label: "pool mean", values: s.mean, color: PALETTE[0] },
  ];
  // The validations and accepted children as dots at their own times: merged into the x axis.
  const xs = [...s.t];
  const marks = [...view.validated.map((p) => ({ t: p.t, v: p.score, k: "v" })), ...view.accepted.map((p) => ({ t: p.t, v: p.score, k: "a" }))];
  const all = [...xs.map((t, i) => ({ t, i })), ...marks.map((m) => ({ t: m.t, m }))].sort((a, b) => a.t - b.t);
  // At a mark's time a line keeps its last value (they change only at progress events).
  const pick = (values) => {
    let last = null;
    return all.map((p) => (p.i !== undefined ? (last = values[p.i]) : last));
  };
  charts.time.update(all.map((p) => p.t), [
    ...lines.map((l) => ({ ...l, values: pick(l.values) })),
    { label: "validated", values: all.map((p) => (p.m && p.m.k === "v" ? p.m.v : null)), color: PALETTE[3], points: true, width: 0 },
    { label: "accepted (minibatch)", values: all.map((p) => (p.m && p.m.k === "a" ? p.m.v : null)), color: PALETTE[2], points: true, width: 0 },
  ]);
  charts.evals.update(s.evaluations, lines);
}

function stageNames(view) {
  const names = Object.keys(view.stages);
  return [...STAGE_ORDER.filter((s) => names.includes(s)), ...names.filter((s) => !STAGE_ORDER.includes(s)).sort()];
}

function renderStages(view, charts) {
  const names = stageNames(view);
  const now = view.stages_now;
  fill("stages-now", names.length
    ? table(["stage", "in flight", "target K", "queued", "per minute"],
      names.map((name) => {
        const load = now[name];
        return load ? [name, load.in_flight, load.workers, load.queued, load.per_minute.toFixed(1)] : [name, "", "", "", ""];
      }), { numeric: [1, 2, 3, 4] })
    : h("p", { class: "note" }, "No progress event yet."));
  charts.rates.update(view.scores.t, names.map((name, i) => ({ label: name, values: view.stages[name].per_minute, color: PALETTE[i % 10] })));
  charts.queues.update(view.scores.t, names.flatMap((name, i) => [
    { label: `${name} queued`, values: view.stages[name].queued, color: PALETTE[i % 10], stepped: true },
    { label: `${name} in flight`, values: view.stages[name].in_flight, color: PALETTE[i % 10], stepped: true, dash: [4, 3] },
  ]));
}

function renderStaleness(view) {
  const st = view.staleness;
  const actions = Object.keys(st.by_action);
  if (!actions.length) {
    fill("staleness", h("p", { class: "note" }, "No staleness decision yet (proposals kept with Δ = 0 are not logged)."));
    return;
  }
  const groups = actions.map((a, i) => ({ label: a, values: st.by_action[a], color: STALE_COLORS[a] || PALETTE[(i + 5) % 10] }));
  fill("staleness", bars(st.deltas.map((d) => `Δ${d}`), groups, { stacked: true, yLabel: "proposals" }), legend(groups),
    h("p", { class: "note" }, "Δ = pool version now − the version a proposal was made from, stacked by what the staleness policy did (FlashEvolve §3.2)."));
}

function renderOperators(view) {
  const o = view.operators;
  const names = [...new Set([...o.arms, ...o.operators])].sort();
  if (!names.length) {
    fill("operators", h("p", { class: "note" }, "No proposal yet."));
    return;
  }
  const arm = (name, list) => (o.arms.includes(name) ? list[o.arms.indexOf(name)] : null);
  const op = (name, list) => (o.operators.includes(name) ? list[o.operators.indexOf(name)] : 0);
  fill("operators", table(["operator", "bandit share", "mean reward", "rewarded", "proposed", "accepted"],
    names.map((name) => {
      const share = arm(name, o.share);
      return [name,
        share === null ? "" : h("span", {}, h("span", { class: "bar", style: `width: ${(share * 6).toFixed(2)}em` }), ` ${(share * 100).toFixed(0)}%`),
        arm(name, o.mean_reward) === null ? "" : arm(name, o.mean_reward).toFixed(3),
        arm(name, o.rewarded) ?? "", op(name, o.proposed), op(name, o.accepted)];
    }), { numeric: [2, 3, 4, 5] }),
  h("p", { class: "note" }, "The operator bandit at the last progress event (REFLEX §3) and proposals and acceptances counted from the events."));
}

function renderResume(view, state) {
  const el = document.getElementById("resume");
  const interrupted = view.status === "interrupted";
  el.hidden = !interrupted;
  if (!interrupted) return;
  const command = `evobus resume ${view.campaign} --out ${state.out}`;
  if (el.dataset.command === command) return;
  el.dataset.command = command;
  el.replaceChildren(
    h("b", {}, "Interrupted: "),
    `no event for over a minute and no summary, so nothing runs this campaign now${view.task ? ` (task ${view.task})` : ""}. `,
    "Go on from its last snapshot with ", h("code", { id: "resume-command" }, command), ".");
}

async function renderBest(view, state) {
  const best = view.numbers.best_candidate;
  const key = `${best}|${view.status}`;
  if (!best || state.best === key) return;
  state.best = key;
  let answer;
  try {
    answer = await (await fetch(`/api/campaigns/${encodeURIComponent(state.cid)}/best`)).json();
  } catch (error) {
    fill("best", h("p", { class: "note warn" }, `the best program could not be read: ${error}`));
    return;
  }
  if (state.best !== key) return; // a newer best came meanwhile
  const tab = (label, id, body) => h("details", { open: id === "best-diff" ? true : null },
    h("summary", {}, label), h("div", { id }, body));
  fill("best",
    h("p", {}, h("b", { id: "best-id" }, answer.candidate), ` scores ${score(answer.score)} on validation · `,
      h("a", { href: "#", onclick: (e) => { e.preventDefault(); showCandidate(state, answer.candidate); } }, "its details")),
    answer.source
      ? [tab(`diff from the seed (${diffStat(answer.diff)})`, "best-diff", answer.diff ? diffBlock(answer.diff) : h("p", { class: "note" }, "the same as the seed")),
        tab("its code", "best-code", h("pre", { class: "code" }, answer.source))]
      : h("p", { class: "note" }, answer.note));
}

function diffStat(diff) {
  const lines = diff.split("\n");
  const added = lines.filter((l) => l.startsWith("+") && !l.startsWith("+++")).length;
  const removed = lines.filter((l) => l.startsWith("-") && !l.startsWith("---")).length;
  return `${added} lines added, ${removed} removed`;
}

function renderLineage(view, state) {
  state.tree.update(view.lineage, state.selected);
  renderFailures(view, state);
  renderCandidates(state);
  if (state.selected) {
    const row = view.candidates.find((c) => c.id === state.selected);
    const now = row ? row.state : "";
    if (now !== state.selectedState) showCandidate(state, state.selected);
  }
}

async function showCandidate(state, id) {
  const changed = state.selected !== id;
  state.selected = id;
  const row = state.view && state.view.candidates.find((c) => c.id === id);
  state.selectedState = row ? row.state : "";
  if (changed && state.view) renderLineage(state.view, state);
  const panel = document.getElementById("candidate");
  let details;
  try {
    const answer = await fetch(`/api/campaigns/${encodeURIComponent(state.cid)}/candidates/${encodeURIComponent(id)}`);
    if (!answer.ok) {
      panel.replaceChildren(h("p", { class: "note" }, `${id}: ${await answer.text()}`));
      return;
    }
    details = await answer.json();
  } catch (error) {
    panel.replaceChildren(h("p", { class: "note warn" }, `${id}: ${error}`));
    return;
  }
  if (state.selected !== id) return; // another was picked meanwhile
  panel.replaceChildren(...candidatePanel(details, state));
}

function candidatePanel(d, state) {
  const parents = d.parents.length
    ? d.parents.flatMap((p, i) => [i ? " + " : "", h("a", { href: "#", onclick: (e) => { e.preventDefault(); showCandidate(state, p); } }, p)])
    : ["none (the seed)"];
  const out = [
    h("h3", { id: "candidate-id" }, `${d.id} — ${d.state}`),
    h("p", {}, d.decision),
    ...candidateSteering(state, d.id),
    h("p", {}, "operator ", h("b", {}, d.operator), ", from ", ...parents,
      d.validation !== null ? ` · validation ${score(d.validation)}` : ""),
  ];
  if (d.rationale) out.push(h("h3", {}, "rationale"), h("p", {}, d.rationale));
  out.push(h("h3", {}, "diagnosis"), d.diagnosis ? h("p", {}, d.diagnosis) : h("p", { class: "note" }, "none recorded (the critic's verdict is kept with a decided candidate)"));
  out.push(h("h3", {}, "evaluations"));
  if (!d.evaluations.length) out.push(h("p", { class: "note" }, "none yet"));
  for (const e of d.evaluations) {
    out.push(h("p", {}, `${score(e.score)} on ${e.split || "its instances"} at ${e.at.toFixed(1)} s`,
      e.agent_id ? ` by ${e.agent_id}` : "", ` [${e.isolation}]`, e.error ? h("span", { class: "warn" }, ` error: ${e.error}`) : ""));
    if (e.instances.length) {
      out.push(table(["instance", "score", "error"], e.instances.map((i) => [i.instance, score(i.score), i.error]), { numeric: [1] }));
    }
    if (e.evidence) out.push(h("img", { class: "evidence", src: e.evidence, alt: `evidence of ${d.id}, ${e.work_id}` }));
  }
  if (d.instances_note) out.push(h("p", { class: "note" }, `per instance: ${d.instances_note}`));
  if (d.evidence_note) out.push(h("p", { class: "note" }, `evidence: ${d.evidence_note}`));
  out.push(h("h3", {}, d.parents.length ? `diff from ${d.parents[0]}` : "source"));
  if (d.diff) out.push(diffBlock(d.diff));
  else if (d.source) out.push(h("pre", {}, d.source));
  else out.push(h("p", { class: "note" }, d.workspace_note || "no change from its parent"));
  return out;
}

function diffBlock(diff) {
  return h("pre", { class: "diff" }, diff.split("\n").filter((l, i, all) => i < all.length - 1 || l).map((line) => {
    const kind = line.startsWith("+++") || line.startsWith("---") ? "hunk"
      : line.startsWith("@@") ? "hunk" : line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : null;
    return kind ? h("span", { class: kind }, line) : line + "\n";
  }));
}

function renderSkills(view) {
  fill("skills", view.skills.length
    ? table(["skill", "version", "origin", "utility", "uses", ""],
      view.skills.map((s) => [s.name, s.version || "", s.origin, s.utility === null ? "" : s.utility.toFixed(3), s.uses, s.retired ? "retired" : ""]),
      { numeric: [1, 3, 4] })
    : h("p", { class: "note" }, "No skill learned or used yet."));
}

function renderAgents(view) {
  const rows = view.agents;
  const from = rows.length ? rows[0].source : "";
  fill("agents", rows.length
    ? [table(["role", "agent", "pid", "host", "items", "in flight"],
      rows.map((a) => [a.role, a.agent_id, a.pid || "", a.host, a.items, a.concurrency ? `${a.in_flight}/${a.concurrency}` : ""]),
      { numeric: [2, 4] }),
    h("p", { class: "note" }, from === "heartbeat" ? "Heard on the bus (heartbeats; items: of this campaign)."
      : from === "summary" ? "From the campaign's summary."
        : "Named by the events (this page hears no heartbeats: no bus, or a user that may not read them).")]
    : h("p", { class: "note" }, "No agent heard yet."));
}

function renderFailures(view, state) {
  const groups = view.failures;
  fill("failures", groups.length
    ? table(["error", "candidates", "first of them"], groups.map((g) => [
      h("a", { href: "#", title: "list these candidates", onclick: (e) => { e.preventDefault(); setFilter(state, "error", g.error); } }, g.error),
      g.count,
      g.candidates.flatMap((id, i) => [i ? ", " : "", h("a", { href: "#", onclick: (e) => { e.preventDefault(); showCandidate(state, id); } }, id)]),
    ]), { numeric: [1] })
    : h("p", { class: "note" }, "No candidate failed."));
}

function setFilter(state, key, value) {
  state.filter[key] = value;
  renderCandidates(state);
}

/** The candidates table, filtered by the selects and the search box. */
function renderCandidates(state) {
  const view = state.view;
  if (!view) return;
  const all = view.candidates;
  const f = state.filter;
  options("filter-state", STATES.filter((s) => all.some((c) => c.state === s)), f.state);
  options("filter-operator", [...new Set(all.map((c) => c.operator))].sort(), f.operator);
  const errors = [...new Set(all.map((c) => c.error).filter(Boolean))].sort();
  options("filter-error", ["(any error)", "(no error)", ...errors], f.error);
  const rows = all.filter((c) => (!f.state || c.state === f.state)
    && (!f.operator || c.operator === f.operator)
    && (!f.error || (f.error === "(any error)" ? c.error : f.error === "(no error)" ? !c.error : c.error === f.error))
    && (!f.search || [c.id, c.operator, c.state, c.error, ...c.parents].join(" ").toLowerCase().includes(f.search)));
  const shown = rows.slice(0, SHOWN_ROWS); // the table is redrawn with every view: kept short
  text("candidates-count", (rows.length === all.length ? `${count(all.length)} candidates` : `${count(rows.length)} of ${count(all.length)}`)
    + (shown.length < rows.length ? `, the newest ${SHOWN_ROWS} listed: filter or search for others` : ""));
  fill("candidates", shown.length
    ? table(["id", "operator", "parents", "state", "score", "error", "t (s)"],
      shown.map((c) => [c.id, c.operator, c.parents.join("+"), c.state, score(c.score), c.error, c.t.toFixed(1)]),
      { numeric: [4, 6], onRow: (r) => showCandidate(state, shown[r].id), selected: (r) => shown[r].id === state.selected })
    : h("p", { class: "note" }, all.length ? "No candidate matches." : "No proposal yet."));
}

/** Keep a select's options to ``values`` (plus "any") with ``chosen`` selected. */
function options(id, values, chosen) {
  const select = document.getElementById(id);
  if (!select) return;
  const wanted = ["", ...values, ...(chosen && !values.includes(chosen) ? [chosen] : [])];
  const now = [...select.options].map((o) => o.value);
  if (now.join("\u0000") !== wanted.join("\u0000")) {
    select.replaceChildren(...wanted.map((v) => h("option", { value: v }, v || "any")));
  }
  if (select.value !== chosen) select.value = chosen;
}
