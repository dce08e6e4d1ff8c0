// The console's little plain JavaScript: deadlines counting down, the inbox kept fresh while nobody
// edits it, edited arguments checked as JSON while typed, and a conversation page following its
// event stream (text as it streams; the rest of the page fetched again when something happened).
"use strict";

function countdowns() {
  const now = Date.now();
  for (const el of document.querySelectorAll("time.countdown")) {
    const left = Math.round((Date.parse(el.getAttribute("datetime")) - now) / 1000);
    if (left <= 0) { el.textContent = "passed"; el.classList.add("passed"); continue; }
    const h = Math.floor(left / 3600), m = Math.floor((left % 3600) / 60), s = left % 60;
    el.textContent = "in " + (h ? h + "h " : "") + (h || m ? String(m).padStart(h ? 2 : 1, "0") + "m " : "") + String(s).padStart(2, "0") + "s";
    el.classList.toggle("soon", left < 300);
  }
}

function checkJson(area) {
  const outcome = document.getElementById(area.getAttribute("aria-describedby"));
  let problem = "";
  try {
    const value = JSON.parse(area.value);
    if (value === null || typeof value !== "object" || Array.isArray(value)) problem = "the arguments must be a JSON object";
  } catch (e) {
    problem = "not JSON: " + e.message;
  }
  area.setAttribute("aria-invalid", problem ? "true" : "false");
  if (outcome) {
    outcome.textContent = problem;
    outcome.className = problem ? "outcome refused" : "outcome";
  }
}

document.addEventListener("input", (event) => {
  const area = event.target;
  if (area.matches && area.matches("textarea.json")) { area.dataset.dirty = "1"; checkJson(area); }
  else if (area.closest && area.closest("form.answer")) area.dataset.dirty = "1";
});

function inboxRefresh() {
  const inbox = document.getElementById("inbox");
  const filters = document.querySelector("form.filters");
  if (!inbox || !filters || !window.htmx) return;
  const busy = inbox.contains(document.activeElement) || inbox.querySelector("[data-dirty]") || inbox.querySelector("input[name=reason]:not([value=''])");
  if (!busy) htmx.trigger(filters, "change");
}

function follow() {
  const live = document.getElementById("live");
  if (!live || live.hasAttribute("data-closed") || !window.EventSource) return;
  const streaming = document.getElementById("streaming"), streamed = document.getElementById("streamed");
  let timer = null;
  const refresh = () => {
    clearTimeout(timer);
    timer = setTimeout(() => {
      const body = document.getElementById("body");
      if (body && !body.contains(document.activeElement)) htmx.trigger(body, "refresh");
    }, 250);
  };
  const source = new EventSource(live.dataset.events);
  // The dedupe rule (workflows/events.py): a call's text is its latest attempt's; the first delta
  // of a page opened mid-reply is the text so far; a delta whose earlier text never came waits
  // for the call's end, which brings the whole text. The page's refreshes keep it until that end.
  let call = null, attempt = 0, text = "", over = false;
  source.addEventListener("text_delta", (e) => {
    const delta = JSON.parse(e.data);
    if (delta.model_call !== call || delta.attempt > attempt) { call = delta.model_call; attempt = delta.attempt; text = ""; over = false; }
    if (delta.attempt < attempt || delta.start > text.length) return;
    text = text.slice(0, delta.start) + delta.text;
    streaming.hidden = false;
    streamed.textContent = text;
  });
  source.addEventListener("text_replaced", () => { streamed.textContent = ""; });
  source.addEventListener("state", (e) => {
    const status = document.getElementById("status");
    if (status) status.textContent = JSON.parse(e.data).state;
  });
  for (const type of ["message", "tool_call_started", "tool_call_finished", "approval_requested", "approval_decided", "client_tool_requested", "reply", "summary", "guardrail_checked", "handed_off"]) {
    source.addEventListener(type, refresh);
  }
  for (const type of ["model_call_finished", "model_call_interrupted"]) {
    source.addEventListener(type, (e) => {
      const ended = JSON.parse(e.data);
      if (ended.model_call === call && ended.attempt == null) over = true;
      refresh();
    });
  }
  document.body.addEventListener("htmx:afterSwap", (e) => {
    if (e.target.id === "body" && (over || call === null)) { streamed.textContent = ""; streaming.hidden = true; call = null; text = ""; }
  });
  source.addEventListener("end", (e) => {
    source.close();
    const status = document.getElementById("status");
    if (status) status.textContent = JSON.parse(e.data).outcome;
    refresh();
  });
}

// After a decision (or an answer) the card that took it is replaced: focus goes on to the next card
// still waiting (or stays on the decided one), not back to the page's start.
function focusNextCard() {
  const done = document.querySelector("article.call[data-just-decided]");
  if (!done) return;
  done.removeAttribute("data-just-decided");
  const cards = [...document.querySelectorAll("article.call")];
  const next = cards.slice(cards.indexOf(done) + 1).find((card) => !card.classList.contains("decided"));
  const card = next || done;
  if (!card.hasAttribute("tabindex")) card.setAttribute("tabindex", "-1");  // focusable by script only
  card.focus();
}

document.addEventListener("DOMContentLoaded", () => {
  countdowns();
  setInterval(countdowns, 1000);
  setInterval(inboxRefresh, 10000);
  document.body.addEventListener("htmx:afterSwap", countdowns);
  document.body.addEventListener("htmx:afterSettle", focusNextCard);
  follow();
});
