// attnrec web page: plain JavaScript over the service's public HTTP API (no build step, nothing
// loaded from elsewhere). Whatever the server sends (titles, IDs, messages) is shown with
// textContent, never parsed as HTML.

const KEY_STORE = "attnrec.apiKey"; // sessionStorage: the key lives as long as this tab
const SEARCH_LIMIT = 12;
const HISTORY_SHOWN = 50;
const BECAUSE_TOP = 5;

const $ = (id) => document.getElementById(id);

const state = {
  models: [],
  limits: {},
  mode: "user", // "user": a known user's stored history; "build": a history built from items
  user: null, // the loaded user (known, or unknown: recommended for by popularity)
  unknownUser: false, // the loaded user has no stored history
  lastEventAt: null, // unix seconds of the loaded user's last stored event (null: none, or no times)
  built: [], // [{item, title}], oldest first
  searchTimer: 0,
  searchSeq: 0, // answers to superseded requests are dropped
  recSeq: 0,
};

class ApiFailure extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// -- the API -------------------------------------------------------------------------------------
function apiKey() {
  return sessionStorage.getItem(KEY_STORE) || "";
}

async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  const key = apiKey();
  if (key) headers.Authorization = `Bearer ${key}`; // the header serving/auth.py reads
  const init = { method, headers, cache: "no-store" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch {
    throw new ApiFailure(0, "unreachable",
      "Cannot reach the server: it may be stopped or restarting, or the network is down. Try again in a moment.");
  }
  let data = null;
  try {
    data = await response.json();
  } catch {
    data = null; // not JSON (e.g. a proxy's error page): the status says what happened
  }
  if (!response.ok) {
    const err = data && data.error;
    throw new ApiFailure(response.status, (err && err.code) || "http_error",
      (err && err.message) || `HTTP ${response.status} ${response.statusText}`.trim());
  }
  return data;
}

function describeFailure(err, doing) {
  if (!(err instanceof ApiFailure)) return `${doing} failed in this page: ${err}`;
  if (err.status === 401) {
    return apiKey()
      ? "The server refused this API key (401 unauthorized). Check it, then press Use key again."
      : "The server needs an API key (401 unauthorized): type it in the API key field and press Use key.";
  }
  if (err.status === 0) return err.message;
  return `${doing} failed: ${err.message} (${err.status} ${err.code})`;
}

// -- small DOM helpers ---------------------------------------------------------------------------
function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (name === "dataset") Object.assign(node.dataset, value);
    else node[name] = value; // className, textContent, type, ...: properties, never HTML
  }
  node.append(...children.filter((c) => c !== null && c !== undefined));
  return node;
}

function titleOf(entry) {
  return entry.title || "(no title)";
}

function itemLabel(entry) {
  return [el("span", { className: "title", textContent: titleOf(entry) }),
    el("code", { textContent: entry.item })];
}

function showMessage(text, kind = "error") {
  const box = $("message");
  box.textContent = text;
  box.className = `message ${kind}`;
  box.dataset.kind = kind;
  box.hidden = !text;
}

function clearMessage() {
  showMessage("", "info");
}

async function busy(button, work) {
  button.disabled = true;
  try {
    return await work();
  } finally {
    button.disabled = false;
  }
}

// -- models --------------------------------------------------------------------------------------
function currentModel() {
  return state.models.find((m) => m.name === $("model").value) || null;
}

function can(model, capability) {
  // A model still loading or failed is offered as a recommender: the server's answer says what is wrong.
  return model !== null && (model.capabilities.includes(capability) || model.status !== "ready");
}

async function loadModels() {
  try {
    const data = await api("GET", "/v1/models");
    state.models = data.models;
    state.limits = data.limits || {};
    clearMessage();
  } catch (err) {
    state.models = [];
    showMessage(describeFailure(err, "Listing the models"));
  }
  const select = $("model");
  const previous = select.value;
  select.replaceChildren(...state.models.map((m) => {
    const what = [m.model, m.status !== "ready" ? m.status : null].filter(Boolean).join(", ");
    return new Option(what ? `${m.name} (${what})` : m.name, m.name);
  }));
  if (state.models.some((m) => m.name === previous)) select.value = previous;
  onModelChange();
}

function onModelChange() {
  const model = currentModel();
  const recommends = can(model, "recommend");
  const explains = model !== null && model.capabilities.includes("explain");
  $("who-panel").hidden = !recommends;
  $("results-panel").hidden = !recommends;
  $("explain-panel").hidden = !explains;
  $("similar-panel").hidden = true;
  const info = [];
  if (model) {
    if (model.dataset && model.dataset.name) info.push(`trained on ${model.dataset.name}`);
    if (model.n_items) info.push(`${model.n_items.toLocaleString()} items`);
    if (model.capabilities.length) info.push(`can: ${model.capabilities.join(", ")}`);
    if (model.error) info.push(model.error);
  }
  $("model-info").textContent = info.join(" · ");
  if (state.limits.max_k) $("k").max = String(state.limits.max_k);
  state.user = null;
  $("search-results").replaceChildren();
  $("search-note").textContent = "";
  renderHistory();
  renderRecs(null);
  if (state.mode === "build" && recommends) runSearch(); // the built history stays: models may share items
}

// -- the history: a known user's, or one built from items -----------------------------------------
function setMode(mode) {
  state.mode = mode;
  $("user-form").hidden = mode !== "user";
  $("search-form").hidden = mode !== "build";
  $("search-box").hidden = mode !== "build";
  renderHistory();
  renderRecs(null);
  if (mode === "build" && !$("search-results").children.length) runSearch();
}

async function loadUser() {
  const model = currentModel();
  const user = $("user").value.trim();
  if (!user) {
    showMessage("Type a user ID first (or build a history from items).");
    return false;
  }
  const query = new URLSearchParams({ limit: String(HISTORY_SHOWN) });
  if (model) query.set("model", model.name);
  try {
    const data = await api("GET", `/v1/users/${encodeURIComponent(user)}/history?${query}`);
    state.user = user;
    state.unknownUser = false;
    state.lastEventAt = data.last_event_at;
    clearMessage();
    renderHistory(data);
    return true;
  } catch (err) {
    state.user = null;
    renderHistory();
    renderRecs(null); // another user's list must not stand beside the error
    if (err.code === "unknown_user") {
      state.user = user; // Recommend still answers: the API falls back to the most popular items
      state.unknownUser = true;
      $("history-note").textContent = `User ${user} is unknown to this model: no stored history.`;
      showMessage(`Unknown user "${user}": model ${model ? model.name : ""} has no history for this ID. ` +
        "Recommend shows the most popular items; type another user ID, or build a history from items.", "info");
      return true;
    } else {
      showMessage(describeFailure(err, "Loading the user's history"));
    }
    return false;
  }
}

function renderHistory(stored = null) {
  const list = $("history");
  if (state.mode === "user") {
    const items = stored ? stored.items : [];
    list.replaceChildren(...items.map((h) => el("li", { dataset: { item: h.item } }, ...itemLabel(h), eventTag(h))));
    $("history-note").textContent = stored
      ? `User ${stored.user}: ${stored.length} items${stored.length > items.length ? `, the last ${items.length} shown` : ""}.`
      : "Type a user ID and load the history.";
    return;
  }
  list.replaceChildren(...state.built.map((h, i) => el("li", { dataset: { item: h.item } }, ...itemLabel(h),
    el("button", { type: "button", className: "small quiet", textContent: "Remove", title: "Remove from the history",
      onclick: () => { state.built.splice(i, 1); renderHistory(); } }))));
  $("history-note").textContent = state.built.length
    ? `${state.built.length} items.`
    : "Search items above and add them, oldest first.";
}

function addToHistory(entry) {
  if (state.built.some((h) => h.item === entry.item)) return;
  const limit = state.limits.max_history || 1000;
  if (state.built.length >= limit) {
    showMessage(`A history holds at most ${limit} items on this server.`);
    return;
  }
  state.built.push({ item: entry.item, title: entry.title });
  renderHistory();
  markAdded();
}

function markAdded() {
  for (const li of $("search-results").children) {
    const button = li.querySelector("button");
    if (button) button.disabled = state.built.some((h) => h.item === li.dataset.item);
  }
}

function scheduleSearch() {
  clearTimeout(state.searchTimer);
  state.searchTimer = setTimeout(runSearch, 250);
}

async function runSearch() {
  clearTimeout(state.searchTimer);
  const model = currentModel();
  const q = $("search").value.trim();
  const seq = ++state.searchSeq;
  const query = new URLSearchParams({ q, limit: String(SEARCH_LIMIT) });
  if (model) query.set("model", model.name);
  try {
    const data = await api("GET", `/v1/items?${query}`);
    if (seq !== state.searchSeq) return;
    $("search-results").replaceChildren(...data.items.map((entry) => el("li", { dataset: { item: entry.item } },
      ...itemLabel(entry),
      el("button", { type: "button", className: "small", textContent: "Add", onclick: () => addToHistory(entry) }))));
    markAdded();
    $("search-note").textContent = !data.items.length ? `No item matches "${q}".`
      : !q ? "The most popular items. Type to search by title or ID."
        : data.more ? "More items match: refine the search." : "";
  } catch (err) {
    if (seq === state.searchSeq) showMessage(describeFailure(err, "Searching items"));
  }
}

// -- recommendations and their reasons -----------------------------------------------------------
async function whoToRecommendFor() {
  if (state.mode === "build") {
    if (!state.built.length) {
      showMessage("Add at least one item to the history first (search above).");
      return null;
    }
    return { history: state.built.map((h) => h.item) };
  }
  if (state.user === null || state.user !== $("user").value.trim()) {
    if (!(await loadUser())) return null;
  }
  return { user: state.user };
}

async function recommend() {
  const model = currentModel();
  const k = Number($("k").value);
  if (!Number.isInteger(k) || k < 1) {
    showMessage("Top must be a whole number of at least 1.");
    return;
  }
  const who = await whoToRecommendFor();
  if (who === null) return;
  const body = { k, ...who };
  if (model) body.model = model.name;
  const seq = ++state.recSeq;
  try {
    const rec = await api("POST", "/v1/recommend", body);
    if (seq !== state.recSeq) return;
    if (!(state.mode === "user" && state.unknownUser)) clearMessage();
    renderRecs(rec);
    if (rec.method === "popularity") return; // nothing of this user's history to explain
  } catch (err) {
    if (seq !== state.recSeq) return;
    renderRecs(null);
    showMessage(describeFailure(err, "Recommending"));
    return;
  }
  try {
    const method = $("why-method").value; // greedy by default: the most faithful, per item
    const why = await api("POST", "/v1/explain-rec", { ...body, top: BECAUSE_TOP, method });
    if (seq === state.recSeq) renderWhy(why);
  } catch (err) {
    if (seq !== state.recSeq) return;
    $("why-note").textContent = err.status === 501 || err.status === 422
      ? `No reasons shown: ${err.message}` : describeFailure(err, "Explaining the recommendations");
  }
}

function renderRecs(rec) {
  const list = $("recs");
  $("why-note").textContent = "";
  $("similar-panel").hidden = true; // similar items belong to the list they were asked from
  $("similar").replaceChildren();
  if (rec === null) {
    list.replaceChildren();
    $("rec-note").textContent = "Nothing yet.";
    return;
  }
  const notes = [rec.user !== null ? `For user ${rec.user}.` : "For the history."];
  if (rec.method === "popularity") notes.push("The most popular items (the user has no known history).");
  if (rec.fallback) notes.push(`Not fully personalised: ${rec.fallback}.`);
  if (rec.unknown_items.length) notes.push(`Ignored items the model does not know: ${rec.unknown_items.join(", ")}.`);
  $("rec-note").textContent = notes.join(" ");
  list.replaceChildren(...rec.items.map((entry) => el("li", { dataset: { item: entry.item } },
    el("div", { className: "rec-head" },
      el("span", { className: "label" }, ...itemLabel(entry)),
      el("span", { className: "actions" }, // score and buttons wrap together, never one by one
        el("span", { className: "score", textContent: `score ${entry.score.toFixed(3)}`, title: String(entry.score) }),
        el("button", { type: "button", className: "small similar", textContent: "Similar",
          title: "Items similar to this one", onclick: () => showSimilar(entry) }),
        state.mode === "build"
          ? el("button", { type: "button", className: "small quiet add", textContent: "Add",
            title: "Add to the history", onclick: () => addToHistory(entry) })
          : null)))));
}

// "Because you watched *A* and *B*": the starred titles shown emphasised (as text, never HTML).
function reasonLine(text) {
  const parts = text.split("*");
  return el("p", { className: "reason" },
    ...parts.map((part, i) => (i % 2 ? el("em", { textContent: part }) : document.createTextNode(part))));
}

// The event type, day and signal values (e.g. "device: tv") of a history event, for models with
// per-event inputs (null otherwise). The signals are whichever the server sends, named as it names them.
function eventTag(b) {
  const day = b.timestamp == null ? null : new Date(b.timestamp * 1000).toISOString().slice(0, 10);
  const signals = Object.entries(b.signals || {}).filter(([, v]) => v != null).map(([k, v]) => `${k}: ${v}`);
  const text = [b.event, day, ...signals].filter((x) => x != null).join(", ");
  return text ? el("span", { className: "event", textContent: text }) : null;
}

// A reason's "today" or "3 days ago" counts from the history's last event, not from now: say which day.
function relativeTo(because) {
  const times = because.map((b) => b.timestamp).filter((t) => t != null);
  if (!times.length) return null;
  const stored = state.mode === "user" && state.lastEventAt != null ? [state.lastEventAt] : [];
  const last = new Date(Math.max(...stored, ...times) * 1000).toISOString().slice(0, 10);
  return el("p", { className: "hint when", textContent: `Times are counted from the history's last event (${last}), not from today.` });
}

function renderWhy(why) {
  const rows = new Map([...$("recs").children].map((li) => [li.dataset.item, li]));
  const share = why.method === "attention" || why.method === "rollout";
  for (const entry of why.items) {
    const li = rows.get(entry.item);
    if (!li) continue;
    li.querySelector("details")?.remove();
    // Only the history items that raised the score are "behind it" (a negative weight lowered it).
    const behind = share ? entry.because : entry.because.filter((b) => b.weight > 0);
    if (!behind.length && !entry.note && !entry.reason) continue;
    const top = Math.max(...behind.map((b) => Math.abs(b.weight)), 1e-9);
    const reasons = el("ul", { className: "because" }, ...behind.map((b) => el("li", { dataset: { item: b.item } },
      el("div", {}, el("span", { className: "title", textContent: titleOf(b), title: b.item }), eventTag(b)),
      el("meter", { min: 0, max: top, value: Math.max(b.weight, 0), title: b.weight.toFixed(4) }),
      el("span", { className: "weight",
        textContent: share ? `${(100 * b.weight).toFixed(1)}%` : b.weight.toFixed(3) }))));
    const hint = share ? `History items behind it (share of the ${why.method}):`
      : why.method === "greedy" ? "History items behind it, chosen in turn (how much its score drops without each, "
        + "once those above are gone):"
        : "History items behind it (how much its score drops without each one):";
    li.append(el("details", { className: "why" }, el("summary", { textContent: "Why?" }),
      reasonLine(entry.reason || entry.note || "No single history item raised its score."),
      relativeTo(entry.because),
      behind.length ? el("p", { className: "hint", textContent: hint }) : null, reasons));
  }
  if (why.items.every((entry) => !entry.because.length && !entry.note)) {
    $("why-note").textContent = "No reasons shown: no item of the history is known to the model.";
    return;
  }
  const what = why.method === "attention"
    ? `the attention of ${why.predicting} (last layer, mean over heads)`
    : why.method === "occlusion" ? "occlusion (the score drop without each history item, per item)"
      : why.method === "greedy" ? "greedy occlusion (history items chosen in rounds by the score drop, per item)"
        : why.method.replace("_", " ");
  $("why-note").textContent = `Reasons: ${what}` +
    (why.shared ? "; attention belongs to the predicting position, so every item shares one list" : "") +
    `. The model read the last ${why.window} of ${why.history_length} history items.`;
}

async function showSimilar(entry) {
  const model = currentModel();
  const body = { item: entry.item, k: 10 };
  if (model) body.model = model.name;
  try {
    const data = await api("POST", "/v1/similar-items", body);
    $("similar-panel").hidden = false;
    $("similar-for").textContent = `Like ${titleOf(entry)} (${entry.item}), by ${data.method}:`;
    $("similar").replaceChildren(...data.items.map((s) => el("li", { dataset: { item: s.item } }, ...itemLabel(s),
      state.mode === "build"
        ? el("button", { type: "button", className: "small", textContent: "Add", onclick: () => addToHistory(s) })
        : null)));
    $("similar-panel").scrollIntoView({ block: "nearest" });
  } catch (err) {
    showMessage(describeFailure(err, "Finding similar items"));
  }
}

// -- explanation models (PETER) ------------------------------------------------------------------
async function explainPair() {
  const model = currentModel();
  const user = $("peter-user").value.trim();
  const item = $("peter-item").value.trim();
  const feature = $("peter-feature").value.trim();
  if (!user || !item) {
    showMessage("Type a user ID and an item ID to explain.");
    return;
  }
  const body = { user, item };
  if (model) body.model = model.name;
  if (feature) body.feature = feature;
  const out = $("explanation");
  try {
    const data = await api("POST", "/v1/explain", body);
    clearMessage();
    const x = data.explanation || {};
    out.replaceChildren(
      el("blockquote", { textContent: x.text || JSON.stringify(x) }),
      typeof x.rating === "number"
        ? el("p", { textContent: `Predicted rating: ${x.rating.toFixed(2)}` }) : null,
      x.feature ? el("p", { className: "hint", textContent: `About: ${x.feature}` }) : null,
      Array.isArray(x.context_words) && x.context_words.length
        ? el("p", { className: "hint", textContent: `Words it associates with the pair: ${x.context_words.join(", ")}` })
        : null);
  } catch (err) {
    out.replaceChildren();
    showMessage(err.code === "unknown_id" ? `Unknown ID: ${err.message}` : describeFailure(err, "Explaining"));
  }
}

// -- the API key -----------------------------------------------------------------------------------
function showKeyState() {
  $("key-state").textContent = apiKey() ? "key in use (this tab only)" : "no key";
}

function useKey() {
  const key = $("api-key").value.trim();
  if (key && !/^[\x21-\x7e]+$/.test(key)) {
    showMessage("An API key is printable ASCII without spaces.");
    return;
  }
  if (key) sessionStorage.setItem(KEY_STORE, key);
  else sessionStorage.removeItem(KEY_STORE);
  $("api-key").value = "";
  showKeyState();
  loadModels();
}

function forgetKey() {
  sessionStorage.removeItem(KEY_STORE);
  $("api-key").value = "";
  showKeyState();
  loadModels();
}

// -- wiring ----------------------------------------------------------------------------------------
function onSubmit(id, handler) {
  const form = $(id);
  form.addEventListener("submit", (event) => {
    event.preventDefault(); // no navigation: the page talks to the API itself
    const button = form.querySelector("button[type=submit]");
    busy(button, handler);
  });
}

function start() {
  onSubmit("key-form", async () => useKey());
  $("forget-key").addEventListener("click", forgetKey);
  $("model").addEventListener("change", onModelChange);
  for (const radio of document.querySelectorAll("input[name=mode]")) {
    radio.addEventListener("change", () => setMode(radio.value));
  }
  onSubmit("user-form", loadUser);
  onSubmit("search-form", runSearch);
  $("search").addEventListener("input", scheduleSearch);
  onSubmit("rec-form", recommend);
  onSubmit("explain-form", explainPair);
  showKeyState();
  setMode(document.querySelector("input[name=mode]:checked").value);
  loadModels();
}

start();
