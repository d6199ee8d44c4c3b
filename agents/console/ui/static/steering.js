// Steering a running campaign from its page (docs/steering.md): shown only when the server
// says this page may steer (`evobus ui --steer`, as a NATS user allowed to). Each button POSTs
// the same action `evobus pause` and the others send; the campaign's events then show it.

import { h, seconds, table } from "./dom.js";

let allowed = null; // the server's answer: { enabled, by, why }

async function state() {
  if (allowed === null) {
    try {
      allowed = await (await fetch("/api/steering")).json();
    } catch (error) {
      allowed = { enabled: false, by: "", why: String(error) };
    }
  }
  return allowed;
}

/** POST one action; says what happened in the element with id `steer-said`. */
export async function send(cid, action, fields = {}) {
  const said = document.getElementById("steer-said");
  let answer;
  try {
    answer = await fetch(`/api/campaigns/${encodeURIComponent(cid)}/steer/${action}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(fields),
    });
  } catch (error) {
    if (said) said.textContent = `${action}: ${error}`;
    return null;
  }
  const body = answer.ok ? await answer.json() : await answer.text();
  if (said) {
    said.textContent = answer.ok
      ? `${action} sent by ${body.by} (${body.action_id}); its event follows once the orchestrator applies it`
      : `${action} not sent: ${body}`;
  }
  return answer.ok ? body : null;
}

/** Fill the element with id `steering` with the campaign's buttons and note box, if allowed. */
export async function steeringBar(campaign) {
  const bar = document.getElementById("steering");
  const { enabled, by } = await state();
  if (!bar || !enabled) return;
  const note = h("textarea", { id: "steer-note", rows: 2, placeholder: "a note for the models: added to the problem statement of every later prompt" });
  bar.replaceChildren(
    h("h2", {}, "Steer"),
    h("div", { class: "filters" },
      h("button", { id: "steer-pause", onclick: () => send(campaign.cid, "pause") }, "Pause"),
      h("button", { id: "steer-unpause", onclick: () => send(campaign.cid, "unpause") }, "Resume"),
      h("button", { id: "steer-stop", onclick: () => {
        if (window.confirm(`Stop ${campaign.cid}? It finishes now, keeping the best so far; it cannot be resumed.`)) send(campaign.cid, "stop");
      } }, "Stop"),
      h("span", { class: "note" }, `as ${by}`)),
    note,
    h("div", {}, h("button", { id: "steer-note-send", onclick: async () => {
      const text = note.value.trim();
      if (text && await send(campaign.cid, "note", { text })) note.value = "";
    } }, "Add note")),
    h("p", { class: "note", id: "steer-said" }, ""),
  );
  bar.hidden = false;
}

/** The pin and reject buttons of a candidate's panel (none when the page may not steer). */
export function candidateSteering(campaign, id) {
  if (!allowed || !allowed.enabled) return [];
  return [h("div", { class: "filters" },
    h("button", { id: "steer-pin", onclick: () => send(campaign.cid, "pin", { candidate: id }) }, `Pin ${id} as the next parent`),
    h("button", { id: "steer-reject", onclick: () => {
      const reason = window.prompt(`Reject ${id}: why (for the events)?`, "");
      if (reason !== null) send(campaign.cid, "reject", { candidate: id, reason });
    } }, `Reject ${id}`))];
}

/** What people did to the campaign (its steering events), under the cards; hidden when none. */
export function renderSteering(view) {
  const section = document.getElementById("steering-log-section");
  if (!section || !view.steering || !view.steering.length) return;
  section.hidden = false;
  const rows = view.steering.map((s) => [seconds(s.t), s.by, s.refused ? h("span", { class: "warn" }, s.text) : s.text]);
  document.getElementById("steering-log").replaceChildren(table(["at", "by", "what"], rows));
}
