// Orrery's dashboard: reads the ops API of the server that serves it, and
// follows its server-sent events. Plain browser JavaScript, no libraries.
'use strict';

const TOKEN_KEY = 'orrery.token';
const JOURNAL_ROWS = 200; // the journal tab keeps this many records
const RECONNECT_MS = 2000;

const state = {
  worlds: new Map(), // id → world view
  workers: new Map(), // id → worker
  queues: null,
  runs: new Map(), // id → run row, from GET /v1/runs and the stream's run events
  runsKnown: false, // the server answered the runs list, or streams runs
  runEvents: 0, // how many run events the stream has applied
  runTouched: new Map(), // id → runEvents when the stream last changed the run
  tab: 'worlds',
  arg: '', // the tab's world or run, from the location's hash
  live: null, // the journal follower's AbortController
};

const $ = (sel, root = document) => root.querySelector(sel);

// ---- the API ----

class ApiError extends Error {
  constructor(status, code, message, details) {
    super(message);
    this.status = status;
    this.code = code;
    this.details = details || {};
  }
  toString() {
    return `${this.code} (${this.status}): ${this.message}`;
  }
}

let token = sessionStorage.getItem(TOKEN_KEY) || '';
let asking = null; // the pending request for a token, shared by every 401

function headers(extra) {
  const h = Object.assign({ Accept: 'application/json' }, extra);
  if (token) h.Authorization = 'Bearer ' + token;
  return h;
}

// askToken shows the login form and resolves once a token is given.
function askToken(refused) {
  if (!asking) {
    asking = new Promise((resolve) => {
      const form = $('#login');
      $('#login-error').textContent = refused ? 'The server refused that token.' : '';
      form.hidden = false;
      $('#token').value = '';
      $('#token').focus();
      form.onsubmit = (ev) => {
        ev.preventDefault();
        token = $('#token').value.trim();
        sessionStorage.setItem(TOKEN_KEY, token);
        form.hidden = true;
        asking = null;
        resolve();
      };
    });
  }
  return asking;
}

// api sends one request and answers its JSON, or throws an ApiError with
// the server's code and message. A 401 asks for the token and tries again.
async function api(method, path, body, signal) {
  for (;;) {
    const init = { method, signal, headers: headers() };
    if (body !== undefined) {
      init.headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    const sent = token;
    const res = await fetch(path, init);
    if (res.status === 401) {
      // Another request may have been given a token meanwhile.
      if (token === sent) await askToken(sent !== '');
      continue;
    }
    const text = await res.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch (_) {
      data = null;
    }
    if (!res.ok) {
      const code = (data && data.code) || 'http_' + res.status;
      const msg = (data && data.message) || text.slice(0, 200) || res.statusText;
      throw new ApiError(res.status, code, msg, data && data.details);
    }
    return data;
  }
}

const enc = encodeURIComponent;

// ---- formatting ----

function fmtTime(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  if (isNaN(d)) return String(iso);
  return d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

function fmtDuration(ms) {
  if (ms === undefined || ms === null || isNaN(ms)) return '';
  if (ms < 1000) return Math.round(ms) + ' ms';
  if (ms < 60000) return (ms / 1000).toFixed(1) + ' s';
  const m = Math.floor(ms / 60000);
  if (m < 60) return `${m} min ${Math.round((ms % 60000) / 1000)} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

function short(hash) {
  return hash && hash.length > 16 ? hash.slice(0, 12) + '…' : hash || '';
}

function yesNo(b) {
  return b ? 'yes' : 'no';
}

// ---- notices: an action's result or its typed error ----

function notify(text, isError) {
  const n = $('#notice');
  n.textContent = text;
  n.className = isError ? 'error' : 'ok';
  n.hidden = false;
}

async function act(label, f) {
  try {
    const msg = await f();
    notify(`${label}: ${msg}`, false);
  } catch (e) {
    notify(`${label}: ${e instanceof ApiError ? e.toString() : e.message}`, true);
  }
}

// ---- tables: rows kept by key, updated in place ----

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c);
  return e;
}

// syncRows makes tbody show items in order, one row per key: a row is
// built once by make(item), then update(row, item) sets its cells, so a
// button under the pointer stays the same element.
function syncRows(tbody, items, key, make, update) {
  const byKey = new Map();
  for (const tr of Array.from(tbody.children)) byKey.set(tr.dataset.id, tr);
  items.forEach((item, i) => {
    const k = key(item);
    let tr = byKey.get(k);
    if (!tr) {
      tr = make(item);
      tr.dataset.id = k;
    }
    byKey.delete(k);
    update(tr, item);
    if (tbody.children[i] !== tr) tbody.insertBefore(tr, tbody.children[i] || null);
  });
  for (const tr of byKey.values()) tr.remove();
}

function setCell(tr, col, text, cls) {
  const td = tr.querySelector(`td.${col}`);
  if (td.textContent !== String(text)) td.textContent = text;
  if (cls !== undefined && td.dataset.cls !== cls) {
    td.className = col + (cls ? ' ' + cls : '');
    td.dataset.cls = cls;
  }
}

function cells(...cols) {
  return cols.map((c) => el('td', { class: c }));
}

// ---- worlds ----

let renderQueued = false;
function render() {
  if (renderQueued) return;
  renderQueued = true;
  setTimeout(() => {
    renderQueued = false;
    renderWorlds();
    renderWorkers();
    renderQueues();
    renderWorldPickers();
    renderRuns();
  }, 0);
}

function sortedWorlds() {
  return Array.from(state.worlds.values()).sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}

function renderWorlds() {
  const worlds = shownWorlds(sortedWorlds());
  $('#worlds-empty').hidden = worlds.length > 0;
  syncRows($('#worlds tbody'), worlds, (w) => w.id, makeWorldRow, updateWorldRow);
}

function makeWorldRow(w) {
  const tr = el('tr', {}, ...cells('id', 'universe', 'status', 'holder', 'epoch', 'head', 'inbox', 'lineage', 'actions'));
  const id = w.id;
  tr.querySelector('td.id').append(el('a', { href: '#world/' + enc(id), title: 'the world page' }, id));
  const actions = tr.querySelector('td.actions');
  actions.append(
    el('button', { type: 'button', class: 'pause', onclick: () => setStatus(id, 'pause') }, 'Pause'),
    el('button', { type: 'button', class: 'resume', onclick: () => setStatus(id, 'resume') }, 'Resume'),
    el('a', { href: '#queues/' + enc(id), class: 'queues' }, 'Queues'),
    el('button', { type: 'button', class: 'fork', onclick: () => prefillFork(id) }, 'Fork…'),
  );
  return tr;
}

function updateWorldRow(tr, w) {
  const lease = w.lease || {};
  setCell(tr, 'universe', w.universe || '');
  setCell(tr, 'status', w.status || '', 'status-' + (w.status || 'unknown'));
  setCell(tr, 'holder', lease.holder || '–');
  setCell(tr, 'epoch', w.lease ? String(lease.epoch) : '–');
  setCell(tr, 'head', w.head === undefined ? '' : String(w.head));
  const depth = w.inbox_depth === undefined ? '' : String(w.inbox_depth) + (w.inbox_depth_more ? '+' : '');
  setCell(tr, 'inbox', depth);
  setCell(tr, 'lineage', w.lineage ? `${w.lineage.parent}@${w.lineage.forked_at_height}` : '');
  tr.querySelector('button.pause').hidden = w.status !== 'active';
  tr.querySelector('button.resume').hidden = w.status !== 'paused';
}

// mergeWorld folds a world record (an action's answer) into its view.
function mergeWorld(rec) {
  const prev = state.worlds.get(rec.id) || {};
  state.worlds.set(rec.id, Object.assign({}, prev, rec));
  render();
}

function setStatus(id, action) {
  act(`${action} ${id}`, async () => {
    const rec = await api('POST', `/v1/worlds/${enc(id)}/${action}`, { reason: 'from the dashboard' });
    mergeWorld(rec);
    return `status ${rec.status}`;
  });
}

function prefillFork(id) {
  $('#fork-src').value = id;
  $('#fork-id').value = '';
  $('#fork-id').focus();
}

async function fork(ev) {
  ev.preventDefault();
  const src = $('#fork-src').value.trim();
  const id = $('#fork-id').value.trim();
  const h = $('#fork-height').value.trim();
  const body = { id };
  if (h !== '') body.height = Number(h);
  await act(`fork ${src} → ${id}`, async () => {
    const rec = await api('POST', `/v1/worlds/${enc(src)}/fork`, body);
    mergeWorld(rec);
    const at = rec.lineage ? ` at height ${rec.lineage.forked_at_height}` : '';
    return `${rec.id} ${rec.status}${at}`;
  });
}

function renderWorldPickers() {
  const ids = sortedWorlds().map((w) => w.id);
  const key = ids.join('\n');
  const list = $('#world-ids');
  if (list.dataset.key !== key) {
    list.dataset.key = key;
    list.replaceChildren(...ids.map((id) => el('option', { value: id })));
  }
  for (const sel of document.querySelectorAll('select.world-select')) {
    const want = key + '\n\n' + (sel.dataset.selected || '');
    if (sel.dataset.key === want) continue;
    sel.dataset.key = want;
    const chosen = sel.dataset.selected || '';
    const opts = [el('option', { value: '' }, '(choose a world)')];
    for (const id of ids) opts.push(el('option', { value: id }, id));
    if (chosen && !ids.includes(chosen)) opts.push(el('option', { value: chosen }, chosen));
    sel.replaceChildren(...opts);
    sel.value = chosen;
  }
}

// ---- workers ----

function renderWorkers() {
  const workers = shownWorkers(Array.from(state.workers.values()).sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)));
  $('#workers-empty').hidden = workers.length > 0;
  syncRows($('#workers tbody'), workers, (w) => w.id, makeWorkerRow, updateWorkerRow);
}

function makeWorkerRow(w) {
  const tr = el('tr', {}, ...cells('id', 'status', 'roles', 'live', 'draining', 'held', 'assigned', 'capacity', 'heartbeat', 'started', 'actions'));
  tr.querySelector('td.id').textContent = w.id;
  tr.querySelector('td.actions').append(
    el('button', { type: 'button', class: 'drain', onclick: () => drain(w.id, true) }, 'Drain'),
    el('button', { type: 'button', class: 'undrain', onclick: () => drain(w.id, false) }, 'Undrain'),
  );
  return tr;
}

function updateWorkerRow(tr, w) {
  setCell(tr, 'live', yesNo(w.live), w.live ? 'good' : 'bad');
  setCell(tr, 'draining', yesNo(w.draining), w.draining ? 'warn' : '');
  setCell(tr, 'held', String(w.worlds_held));
  setCell(tr, 'assigned', String(w.worlds_assigned));
  setCell(tr, 'capacity', String(w.capacity));
  setCell(tr, 'roles', rolesText(w));
  tr.querySelector('td.roles').title = (w.capabilities || []).join('\n');
  setTime(tr, 'heartbeat', w.heartbeat_at);
  setTime(tr, 'started', w.started_at);
  showWorkerStatus(tr, w);
}

// rolesText names a worker's roles; one that advertised nothing is a binary
// older than worker classes, which runs them all.
function rolesText(w) {
  if (!w.capabilities || w.capabilities.length === 0) return 'all (not advertised)';
  return (w.roles || []).join(', ') || 'none';
}

function drain(id, draining) {
  act(`${draining ? 'drain' : 'undrain'} ${id}`, async () => {
    const w = await api('POST', `/v1/workers/${enc(id)}/drain`, { draining });
    state.workers.set(w.id, w);
    render();
    return `draining ${yesNo(w.draining)}`;
  });
}

// ---- queues, effects and timers ----

// renderWorkflowQueues fills the named workflow queues' table from the
// last GET /v1/queues (the event stream's queues event carries only the
// plane's gauges).
function renderWorkflowQueues(qs) {
  const limit = (n) => (n ? String(n) : '–');
  const counts = (m) => Object.keys(m || {}).sort().map((k) => `${k === '' ? '(none)' : k}: ${m[k]}`).join(', ');
  const body = document.querySelector('#wfqueues tbody');
  body.replaceChildren(...qs.map((q) => el('tr', { 'data-id': q.name },
    el('td', {}, q.name), el('td', {}, limit(q.concurrency)), el('td', {}, limit(q.worker_concurrency)),
    el('td', {}, q.rate_limit ? `${q.rate_limit} / ${q.rate_period_ms} ms` : '–'), el('td', {}, q.partitioned ? 'yes' : 'no'),
    el('td', { class: 'running' }, String(q.running)), el('td', { class: 'waiting' }, String(q.waiting)),
    el('td', {}, counts(q.waiting_by_priority)), el('td', {}, counts(q.waiting_by_partition)), el('td', {}, String(q.admitted_recent)))));
  document.querySelector('#wfqueues-empty').hidden = qs.length > 0;
}

let wfQueuesLoading = false;

// refreshWorkflowQueues reloads the workflow queues while their tab shows.
async function refreshWorkflowQueues() {
  if (state.tab !== 'queues' || wfQueuesLoading) return;
  wfQueuesLoading = true;
  try {
    const q = await api('GET', '/v1/queues');
    renderWorkflowQueues(q.workflow_queues || []);
  } catch (e) {
    notify(`loading the workflow queues: ${e instanceof ApiError ? e.toString() : e.message}`, true);
  } finally {
    wfQueuesLoading = false;
  }
}

function renderQueues() {
  const q = state.queues;
  if (!q) return;
  refreshWorkflowQueues();
  for (const dd of document.querySelectorAll('#queues dd')) {
    const v = String(q[dd.dataset.q]);
    if (dd.textContent !== v) dd.textContent = v;
  }
}

let effectsTimer = null;
// refreshWorldQueues reloads the chosen world's effects and timers, once
// however many events of one read of the stream ask.
function refreshWorldQueues() {
  if (state.tab !== 'queues' || effectsTimer) return;
  effectsTimer = setTimeout(() => {
    effectsTimer = null;
    loadWorldQueues(state.arg);
  }, 0);
}

async function loadWorldQueues(id) {
  try {
    const [eff, tim] = await Promise.all([api('GET', effectsQuery(id)), api('GET', timersQuery(id))]);
    if (state.tab !== 'queues' || state.arg !== id) return;
    const effects = eff.effects || [];
    showQueuePage('effects', effects, eff.next);
    showQueuePage('timers', tim.timers || [], tim.next);
    $('#effects-empty').hidden = effects.length > 0;
    syncRows($('#effects tbody'), effects, (e) => e.intent_hash, makeEffectRow, updateEffectRow);
    const timers = tim.timers || [];
    $('#timers-empty').hidden = timers.length > 0;
    syncRows($('#timers tbody'), timers, (t) => t.intent_hash, makeTimerRow, updateTimerRow);
  } catch (e) {
    notify(`effects and timers of ${id || 'every world'}: ${e instanceof ApiError ? e.toString() : e.message}`, true);
  }
}

function clearWorldQueues() {
  $('#effects tbody').replaceChildren();
  $('#timers tbody').replaceChildren();
  $('#effects-empty').hidden = true;
  $('#timers-empty').hidden = true;
}

function makeEffectRow(e) {
  const tr = el('tr', {}, ...cells('intent', 'world', 'kind', 'state', 'attempt', 'retries', 'enqueued', 'claimed', 'actions'));
  const td = tr.querySelector('td.intent');
  td.textContent = short(e.intent_hash);
  td.title = e.intent_hash + ' (click: into the retry form)';
  td.classList.add('pick');
  td.addEventListener('click', () => {
    $('#retry-hash').value = e.intent_hash;
  });
  tr.querySelector('td.actions').append(
    el('button', { type: 'button', class: 'retry', onclick: () => retry(e.intent_hash, 'from the dashboard') }, 'Retry'),
    el('button', { type: 'button', class: 'hold', onclick: () => holdOrRelease('hold', e.intent_hash) }, 'Hold'),
    el('button', { type: 'button', class: 'release', onclick: () => holdOrRelease('release', e.intent_hash) }, 'Release'),
  );
  return tr;
}

function updateEffectRow(tr, e) {
  setCell(tr, 'kind', e.kind);
  setCell(tr, 'state', e.state, 'state-' + e.state);
  // A held effect waits for an operator: its reason is a hover away.
  tr.querySelector('td.state').title = e.state === 'held' ? `held since ${e.held_at}: ${e.hold_reason || 'no reason given'}` : '';
  tr.querySelector('.hold').hidden = e.state !== 'pending' && e.state !== 'inflight';
  tr.querySelector('.release').hidden = e.state !== 'held';
  setCell(tr, 'attempt', String(e.attempt));
  setCell(tr, 'retries', String(e.retries));
  setWorldCell(tr, e.world);
  setTime(tr, 'enqueued', e.enqueued_at);
  setCell(tr, 'claimed', e.claimed_by || '');
}

function makeTimerRow(t) {
  const tr = el('tr', {}, ...cells('intent', 'world', 'deliver', 'state', 'attempt', 'claimed'));
  const td = tr.querySelector('td.intent');
  td.textContent = short(t.intent_hash);
  td.title = t.intent_hash;
  return tr;
}

function updateTimerRow(tr, t) {
  setWorldCell(tr, t.world);
  setTime(tr, 'deliver', t.deliver_at);
  setCell(tr, 'state', t.state, 'state-' + t.state);
  setCell(tr, 'attempt', String(t.attempt));
  setCell(tr, 'claimed', t.claimed_by || '');
}

function retry(hash, reason) {
  return act(`retry ${short(hash)}`, async () => {
    const st = await api('POST', `/v1/effects/${enc(hash)}/retry`, { reason });
    refreshWorldQueues();
    return `state ${st.state}, retries ${st.retries} (world ${st.world})`;
  });
}

// holdOrRelease holds an effect (no adapter runs it until released or
// resolved) or releases a held one (it runs again), as retry does, with
// the dashboard named as the reason.
function holdOrRelease(op, hash) {
  const reason = 'from the dashboard';
  return act(`${op} ${short(hash)}`, async () => {
    const st = await api('POST', `/v1/effects/${enc(hash)}/${op}`, { reason });
    refreshWorldQueues();
    return `state ${st.state} (world ${st.world})`;
  });
}

// ---- journal: the last records, followed with the long-poll ----

function stopJournal() {
  if (state.live) state.live.abort();
  state.live = null;
}

async function followJournal(id) {
  stopJournal();
  const ctl = new AbortController();
  state.live = ctl;
  const tbody = $('#journal tbody');
  tbody.replaceChildren();
  $('#journal-empty').hidden = true;
  const status = $('#journal-state');
  try {
    const view = await api('GET', `/v1/worlds/${enc(id)}`, undefined, ctl.signal);
    // Records at or below the compaction floor are gone: start above it.
    let after = Math.max(view.journal_floor || 0, view.head - JOURNAL_ROWS);
    let first = true;
    status.textContent = 'following';
    for (;;) {
      const wait = first ? '' : '&wait_ms=25000';
      const page = await api('GET', `/v1/worlds/${enc(id)}/journal?after=${after}&limit=${JOURNAL_ROWS}${wait}`, undefined, ctl.signal);
      if (ctl.signal.aborted) return;
      for (const r of page.records) tbody.prepend(recordRow(r));
      while (tbody.children.length > JOURNAL_ROWS) tbody.lastElementChild.remove();
      $('#journal-empty').hidden = tbody.children.length > 0;
      after = page.next;
      first = false;
    }
  } catch (e) {
    if (ctl.signal.aborted) return;
    status.textContent = '';
    notify(`journal of ${id}: ${e instanceof ApiError ? e.toString() : e.message}`, true);
  }
}

function recordRow(r) {
  const tr = el('tr', {}, ...cells('height', 'persisted', 'input', 'type', 'outcome', 'error', 'hash'));
  tr.dataset.id = String(r.height);
  tr.querySelector('td.height').textContent = String(r.height);
  tr.querySelector('td.persisted').textContent = fmtTime(r.persisted_at);
  tr.querySelector('td.input').textContent = r.input ? `${r.input.kind} #${r.input.seq}` : r.event_type;
  tr.querySelector('td.type').textContent = (r.input && r.input.type) || '';
  const out = tr.querySelector('td.outcome');
  out.textContent = r.outcome || '';
  out.className = 'outcome outcome-' + (r.outcome || 'none');
  tr.querySelector('td.error').textContent = r.error || '';
  const h = tr.querySelector('td.hash');
  h.textContent = short(r.state_hash);
  h.title = r.state_hash || '';
  return tr;
}

// ---- runs ----

// The runs endpoints belong to the workflow engine; the tab reads the
// fields it names in the package doc and tolerates their absence.
function runID(r) {
  return r.id || r.run_id || '';
}

// durationOf is a run's, step's or attempt's duration in milliseconds:
// duration_ms, else a Go duration in nanoseconds, else end − start.
function durationOf(x) {
  if (typeof x.duration_ms === 'number') return x.duration_ms;
  if (typeof x.duration === 'number') return x.duration / 1e6;
  const start = Date.parse(x.started_at || x.started || '');
  const end = Date.parse(x.ended_at || x.finished_at || x.ended || '');
  if (!isNaN(start) && !isNaN(end)) return end - start;
  return undefined;
}

// stepOf flattens a timeline step whose attempts are a list (each with
// its own times and error) into one row: the count, the first attempt's
// start, the last one's duration and error.
function stepOf(s) {
  if (!Array.isArray(s.attempts)) return s;
  const first = s.attempts[0] || {};
  const last = s.attempts[s.attempts.length - 1] || {};
  return Object.assign({}, s, {
    attempts: s.attempts.length,
    started_at: s.started_at || first.started_at,
    duration_ms: s.duration_ms !== undefined ? s.duration_ms : durationOf(last),
    error: s.error || last.error || '',
  });
}

function stepCount(r) {
  if (typeof r.steps === 'number') return r.steps;
  if (Array.isArray(r.steps)) return r.steps.length;
  if (typeof r.step_count === 'number') return r.step_count;
  return '';
}

async function loadRuns() {
  const since = state.runEvents;
  try {
    const data = await api('GET', '/v1/runs');
    const runs = Array.isArray(data) ? data : (data && data.runs) || [];
    // A row the stream changed while the list was on its way is newer
    // than the list's.
    const next = new Map(runs.map((r) => [runID(r), r]));
    for (const [id, r] of state.runs) {
      if ((state.runTouched.get(id) || 0) > since) next.set(id, r);
    }
    state.runs = next;
    state.runsKnown = true;
    renderRuns();
    if (state.arg) loadRun(state.arg);
  } catch (e) {
    state.runs.clear();
    state.runsKnown = false;
    $('#runs tbody').replaceChildren();
    const msg = $('#runs-message');
    msg.hidden = false;
    msg.textContent = e instanceof ApiError && e.status === 404 ? 'No runs endpoint on this server.' : `runs: ${e}`;
  }
}

// renderRuns shows the runs as last read or streamed, sorted by id as the
// list endpoint sorts them.
function renderRuns() {
  if (!state.runsKnown) return;
  const all = Array.from(state.runs.values()).sort((a, b) => (runID(a) < runID(b) ? -1 : runID(a) > runID(b) ? 1 : 0));
  const runs = shownRuns(all);
  const msg = $('#runs-message');
  msg.hidden = runs.length > 0;
  msg.textContent = runs.length ? '' : all.length ? 'No runs match.' : 'No runs.';
  syncRows($('#runs tbody'), runs, runID, makeRunRow, updateRunRow);
}

function makeRunRow(r) {
  const id = runID(r);
  const tr = el('tr', {}, ...cells('id', 'workflow', 'status', 'started', 'duration', 'steps', 'actions'));
  tr.querySelector('td.id').append(el('a', { href: '#runs/' + enc(id) }, id));
  return tr;
}

function updateRunRow(tr, r) {
  setCell(tr, 'workflow', runWorkflow(r)); // lists.js
  setCell(tr, 'status', r.status || '', 'status-' + (r.status || 'unknown'));
  tr.querySelector('td.status').title = r.last_error || r.error || '';
  setTime(tr, 'started', r.started_at || r.started);
  setCell(tr, 'duration', fmtDuration(durationOf(r)));
  setCell(tr, 'steps', String(stepCount(r)));
  showRunActions(tr.querySelector('td.actions'), r);
}

async function loadRun(id) {
  const box = $('#run-detail');
  try {
    const run = await api('GET', `/v1/runs/${enc(id)}`);
    const steps = ((run && (Array.isArray(run.steps) ? run.steps : run.timeline)) || []).map(stepOf);
    $('#run-detail-id').textContent = id;
    syncRows($('#timeline tbody'), steps, (s) => String(s.step_id || s.id), makeStepRow, updateStepRow);
    showRunDetail(Object.assign({ id }, run));
    box.hidden = false;
  } catch (e) {
    box.hidden = true;
    notify(`run ${id}: ${e instanceof ApiError && e.status === 404 ? 'not found (' + e.message + ')' : e}`, true);
  }
}

function makeStepRow(s) {
  const tr = el('tr', {}, ...cells('step', 'attempts', 'status', 'started', 'duration', 'error'));
  tr.querySelector('td.step').textContent = String(s.step_id || s.id);
  return tr;
}

function updateStepRow(tr, s) {
  setCell(tr, 'attempts', String(s.attempts === undefined ? '' : s.attempts));
  setCell(tr, 'status', s.status || '', 'status-' + (s.status || 'unknown'));
  setTime(tr, 'started', s.started_at || s.started);
  setCell(tr, 'duration', fmtDuration(durationOf(s)));
  setCell(tr, 'error', s.error || s.last_error || '');
}

function cancelRun(id) {
  return act(`cancel run ${id}`, async () => {
    try {
      const r = await api('POST', `/v1/runs/${enc(id)}/cancel`, {});
      if (state.tab === 'runs') loadRuns();
      return `status ${(r && r.status) || 'cancelling'}`;
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) {
        throw new ApiError(404, e.code, `no such run, or no runs endpoint on this server (${e.message})`);
      }
      throw e;
    }
  });
}

// ---- the live stream ----

function setLive(cls, text) {
  const l = $('#live');
  l.className = 'live ' + cls;
  l.textContent = text;
}

function applyEvent(name, data) {
  switch (name) {
    case 'world':
      state.worlds.set(data.id, data);
      if (state.tab === 'world') window.worldPage.changed(data); // world.js
      if (state.tab === 'queues' && state.arg === data.id) refreshWorldQueues();
      break;
    case 'worker':
      state.workers.set(data.id, data);
      break;
    case 'run':
      state.runs.set(runID(data), data);
      state.runTouched.set(runID(data), ++state.runEvents);
      state.runsKnown = true;
      // The open timeline follows its run: a changed row is a new step
      // or a new status.
      if (state.tab === 'runs' && state.arg === runID(data)) loadRun(state.arg);
      break;
    case 'removed':
      if (data.kind === 'run') state.runs.delete(data.id);
      else (data.kind === 'worker' ? state.workers : state.worlds).delete(data.id);
      break;
    case 'queues':
      state.queues = data;
      refreshWorldQueues();
      break;
    case 'summary': {
      const more = data.worlds > data.worlds_streamed ? ` (live: first ${data.worlds_streamed})` : '';
      $('#summary').textContent = `${data.worlds} worlds${more}, ${data.workers} workers`;
      break;
    }
    case 'synced':
      setLive('on', 'live');
      break;
    case 'error':
      setLive('stale', `stale: ${data.message || data.code}`);
      return;
    default:
      return;
  }
  render();
}

// parseBlock reads one event of a text/event-stream.
function parseBlock(block) {
  let name = 'message';
  const data = [];
  for (const raw of block.split('\n')) {
    const line = raw.endsWith('\r') ? raw.slice(0, -1) : raw;
    if (line === '' || line.startsWith(':')) continue;
    const i = line.indexOf(':');
    const field = i < 0 ? line : line.slice(0, i);
    let value = i < 0 ? '' : line.slice(i + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'event') name = value;
    else if (field === 'data') data.push(value);
  }
  return data.length ? { name, data: data.join('\n') } : null;
}

// stream follows GET /v1/events for as long as the page is open,
// reconnecting after a pause when the stream ends. fetch rather than
// EventSource, which cannot send the Authorization header.
async function stream() {
  for (;;) {
    try {
      const sent = token;
      const res = await fetch('/v1/events', { headers: headers({ Accept: 'text/event-stream' }) });
      if (res.status === 401) {
        if (token === sent) await askToken(sent !== '');
        continue;
      }
      if (!res.ok) throw new Error(`events: HTTP ${res.status}`);
      setLive('connecting', 'syncing');
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const ev = parseBlock(buf.slice(0, i));
          buf = buf.slice(i + 2);
          if (ev) applyEvent(ev.name, JSON.parse(ev.data));
        }
      }
    } catch (e) {
      console.warn('orrery: event stream', e);
    }
    setLive('off', 'reconnecting');
    await new Promise((r) => setTimeout(r, RECONNECT_MS));
  }
}

// ---- tabs ----

function route() {
  let hash = location.hash.replace(/^#/, '');
  try {
    hash = decodeURIComponent(hash);
  } catch (_) {
    // a hand-typed hash that is not valid percent-encoding: take it as is
  }
  const slash = hash.indexOf('/');
  let tab = slash < 0 ? hash : hash.slice(0, slash);
  const arg = slash < 0 ? '' : hash.slice(slash + 1);
  if (!document.getElementById('tab-' + tab)) tab = 'worlds';
  const changed = tab !== state.tab || arg !== state.arg;
  state.tab = tab;
  state.arg = arg;
  for (const s of document.querySelectorAll('section.tab')) s.hidden = s.id !== 'tab-' + tab;
  for (const a of document.querySelectorAll('#tabs a')) a.classList.toggle('active', a.dataset.tab === tab);
  for (const sel of document.querySelectorAll('select.world-select')) sel.dataset.selected = arg;
  renderWorldPickers();
  if (tab !== 'journal') stopJournal();
  if (tab !== 'world') window.worldPage.close(); // world.js
  if (!changed && state.started) return;
  state.started = true;
  switch (tab) {
    case 'queues':
      clearWorldQueues();
      resetQueuePages();
      loadWorldQueues(arg);
      refreshWorkflowQueues();
      break;
    case 'journal':
      if (arg) followJournal(arg);
      else {
        stopJournal();
        $('#journal tbody').replaceChildren();
      }
      break;
    case 'world':
      window.worldPage.open(arg); // world.js: the world page
      break;
    case 'runs':
      $('#run-detail').hidden = true;
      loadRuns();
      break;
    case 'schedules':
      loadSchedules();
      break;
  }
}

// ---- schedules: state, spec, next fire times, counters, last result ----

function scheduleSpec(sp) {
  let c = sp.cron ? sp.cron : `every ${sp.every}${sp.offset ? ' +' + sp.offset : ''}`;
  if (sp.time_zone) c += ` (${sp.time_zone})`;
  if (sp.jitter) c += ` ~${sp.jitter}`;
  return `${c}; overlap ${sp.overlap}, catch-up ${sp.catch_up}${sp.catch_up_limit ? ' ' + sp.catch_up_limit : ''}`;
}

function scheduleTarget(t) {
  return t.workflow ? `run ${t.workflow}` : `event ${t.type} → ${t.world}`;
}

function makeScheduleRow(s) {
  const tr = el('tr');
  for (let i = 0; i < 10; i++) tr.append(el('td'));
  const pause = el('button', { type: 'button', class: 'sched-pause' });
  pause.addEventListener('click', () => {
    const paused = tr.dataset.state === 'paused';
    act(`${paused ? 'resume' : 'pause'} ${s.id}`, async () => {
      await api('POST', `/v1/schedules/${enc(s.id)}/${paused ? 'resume' : 'pause'}`);
      loadSchedules();
      return paused ? 'resumed' : 'paused';
    });
  });
  const trigger = el('button', { type: 'button' }, 'Trigger');
  trigger.addEventListener('click', () =>
    act(`trigger ${s.id}`, async () => {
      // One key per click: the request may be sent again (after a sign-in),
      // and a trigger with a key it has seen records nothing more.
      const key = `web-${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}`;
      const r = await api('POST', `/v1/schedules/${enc(s.id)}/trigger`, { idempotency_key: key });
      loadSchedules();
      return `tick ${r.tick}${r.run ? ', run ' + r.run : ''}`;
    }));
  tr.append(el('td', {}, pause, ' ', trigger));
  return tr;
}

function updateScheduleRow(tr, s) {
  const c = tr.children;
  tr.dataset.state = s.state;
  c[0].textContent = s.id;
  c[1].textContent = s.state;
  c[2].textContent = scheduleSpec(s.spec);
  c[3].textContent = scheduleTarget(s.spec.target);
  c[4].textContent = (s.next_fire_times || []).slice(0, 3).map(fmtTime).join(', ') || '–';
  c[5].textContent = s.fired;
  c[6].textContent = s.missed;
  c[7].textContent = s.skipped;
  c[8].textContent = s.failed;
  c[9].textContent = s.last_result || '–';
  c[10].querySelector('.sched-pause').textContent = s.state === 'paused' ? 'Resume' : 'Pause';
}

async function loadSchedules() {
  try {
    const all = [];
    let after = '';
    for (;;) {
      const data = await api('GET', '/v1/schedules?limit=1000' + (after ? '&after=' + enc(after) : ''));
      all.push(...data.schedules);
      if (!data.next) break;
      after = data.next;
    }
    $('#schedules-empty').hidden = all.length > 0;
    syncRows($('#schedules tbody'), all, (s) => s.id, makeScheduleRow, updateScheduleRow);
  } catch (e) {
    notify(`schedules: ${e instanceof ApiError ? e.toString() : e.message}`, true);
  }
}

// allWorlds reads every page of the worlds list: the tab filters and
// pages what the stream then keeps current.
async function allWorlds() {
  const out = [];
  for (let after = ''; ; ) {
    const page = await api('GET', '/v1/worlds?detail=true' + (after ? '&after=' + enc(after) : ''));
    out.push(...(page.worlds || []));
    if (!page.next) return out;
    after = page.next;
  }
}

async function loadAll() {
  try {
    const [worlds, workers, queues] = await Promise.all([allWorlds(), api('GET', '/v1/workers'), api('GET', '/v1/queues')]);
    for (const w of worlds) state.worlds.set(w.id, w);
    for (const w of workers.workers) state.workers.set(w.id, w);
    state.queues = queues;
    render();
  } catch (e) {
    notify(`loading: ${e instanceof ApiError ? e.toString() : e.message}`, true);
  }
}

function init() {
  $('#fork-form').addEventListener('submit', fork);
  $('#retry-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    retry($('#retry-hash').value.trim(), $('#retry-reason').value.trim());
  });
  $('#runs-refresh').addEventListener('click', loadRuns);
  $('#cancel-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    cancelRun($('#cancel-id').value.trim());
  });
  for (const sel of document.querySelectorAll('select.world-select')) {
    const tab = sel.id.replace(/-world$/, '');
    sel.addEventListener('change', () => {
      location.hash = '#' + tab + (sel.value ? '/' + enc(sel.value) : '');
    });
  }
  listsInit();
  window.addEventListener('hashchange', route);
  $('#schedules-refresh').addEventListener('click', loadSchedules);
  route();
  loadAll();
  stream();
}

init();
