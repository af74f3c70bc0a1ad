// The dashboard's lists a person can debug with: search, filters and pages
// on worlds, workers and runs; effects and timers across worlds, paged by
// the API's cursor; times shown absolute with how long ago beside them; a
// run's attempts with their input, output and error, and only the actions
// that apply; a worker's status, where a dead worker is dead, never
// draining. It is loaded before app.js and only defines: app.js calls in.
'use strict';

// LIST_PAGE is the rows a page, on every list: 50, or ?rows=N in the
// page's address (1 to 1000).
const LIST_PAGE = (() => {
  const n = Number(new URLSearchParams(location.search).get('rows'));
  return n >= 1 && n <= 1000 ? Math.floor(n) : 50;
})();

// ---- times: absolute in the cell, relative beside it ----

// relTime says how long ago (or ahead) iso is, in its largest unit.
function relTime(iso, now = Date.now()) {
  const t = Date.parse(iso || '');
  if (isNaN(t)) return '';
  let s = Math.round((now - t) / 1000);
  const future = s < 0;
  if (future) s = -s;
  let v;
  if (s < 60) v = `${s} s`;
  else if (s < 3600) v = `${Math.floor(s / 60)} min`;
  else if (s < 172800) v = `${Math.floor(s / 3600)} h`;
  else v = `${Math.floor(s / 86400)} days`;
  return future ? `in ${v}` : `${v} ago`;
}

// setTime shows iso in a cell: the absolute time as its text, how long ago
// beside it (the sheet draws data-rel after the text, so the cell's text
// stays the time alone) and both on hover.
function setTime(tr, col, iso) {
  setCell(tr, col, fmtTime(iso));
  const td = tr.querySelector(`td.${col}`);
  td.dataset.at = iso || '';
  td.dataset.rel = iso ? relTime(iso) : '';
  td.title = iso ? `${fmtTime(iso)} (${td.dataset.rel})` : '';
}

// refreshTimes moves every relative time on the page on.
function refreshTimes() {
  for (const td of document.querySelectorAll('[data-at]')) {
    if (!td.dataset.at) continue;
    td.dataset.rel = relTime(td.dataset.at);
    td.title = `${fmtTime(td.dataset.at)} (${td.dataset.rel})`;
  }
}

// ---- client-side filters and pages over what the stream keeps ----

const listPages = { worlds: 0, workers: 0, runs: 0 };

function filterValue(id) {
  const e = document.getElementById(id);
  return e ? e.value.trim() : '';
}

// pageOf cuts list's current page out of rows and shows where it is.
function pageOf(list, rows) {
  const pages = Math.max(1, Math.ceil(rows.length / LIST_PAGE));
  listPages[list] = Math.min(listPages[list], pages - 1);
  const p = listPages[list];
  const from = p * LIST_PAGE;
  const to = Math.min(rows.length, from + LIST_PAGE);
  $(`#${list}-page`).textContent = rows.length ? `${from + 1}–${to} of ${rows.length}` : '0 of 0';
  $(`#${list}-prev`).disabled = p === 0;
  $(`#${list}-next`).disabled = p >= pages - 1;
  return rows.slice(from, to);
}

function hasText(s, q) {
  return !q || String(s || '').toLowerCase().includes(q.toLowerCase());
}

// shownWorlds are the worlds of the current page that pass the filters.
function shownWorlds(worlds) {
  const sel = $('#worlds-universe');
  const universes = Array.from(new Set(worlds.map((w) => w.universe))).sort();
  const have = Array.from(sel.options).slice(1).map((o) => o.value);
  if (have.join('\n') !== universes.join('\n')) {
    const chosen = sel.value;
    sel.replaceChildren(el('option', { value: '' }, 'every universe'), ...universes.map((u) => el('option', { value: u }, u)));
    sel.value = universes.includes(chosen) ? chosen : '';
  }
  const q = filterValue('worlds-q');
  const universe = sel.value;
  const status = filterValue('worlds-status');
  return pageOf('worlds', worlds.filter((w) =>
    hasText(w.id, q) && (!universe || w.universe === universe) && (!status || w.status === status)));
}

// workerStatus is live, draining (live and marked draining) or dead (no
// heartbeat within the server's live-for window, whatever its mark says).
function workerStatus(w) {
  if (w.status) return w.status;
  if (!w.live) return 'dead';
  return w.draining ? 'draining' : 'live';
}

function shownWorkers(workers) {
  const q = filterValue('workers-q');
  const status = filterValue('workers-status');
  return pageOf('workers', workers.filter((w) => hasText(w.id, q) && (!status || workerStatus(w) === status)));
}

// showWorkerStatus sets a worker row's status and buttons: Drain only on a
// live worker, Undrain only on a live draining one; a dead worker's
// draining mark reads "-", since it drains nothing.
function showWorkerStatus(tr, w) {
  const status = workerStatus(w);
  setCell(tr, 'status', status, 'status-' + status);
  if (status === 'dead') setCell(tr, 'draining', '-', '');
  tr.querySelector('button.drain').hidden = status !== 'live';
  tr.querySelector('button.undrain').hidden = status !== 'draining';
}

// runWorkflow is a run's workflow and the version it is pinned to, as the
// list shows it ("payout v2"), so a search for "v1" finds a version's runs.
function runWorkflow(r) {
  const wf = r.workflow || r.workflow_name || '';
  return r.version ? `${wf} v${r.version}` : wf;
}

function shownRuns(runs) {
  const q = filterValue('runs-q');
  const status = filterValue('runs-status');
  return pageOf('runs', runs.filter((r) =>
    (hasText(runID(r), q) || hasText(runWorkflow(r), q)) && (!status || r.status === status)));
}

// ---- runs: actions where they apply, attempts in detail ----

const FINISHED = ['completed', 'failed', 'cancelled'];

// runActions are the controls a run takes: the API's list when it sends
// one, else what its status allows (none once finished). Signal and reset
// need more than a click (a value, a step): they are the CLI's and the
// API's.
function runActions(r) {
  if (Array.isArray(r.actions)) return r.actions.filter((a) => a !== 'signal' && a !== 'reset');
  if (FINISHED.includes(r.status)) return [];
  if (r.status === 'paused') return ['resume', 'cancel'];
  if (r.status === 'blocked') return ['pause', 'cancel', 'terminate'];
  return ['pause', 'cancel'];
}

const ACTION_LABELS = { pause: 'Pause', resume: 'Resume', cancel: 'Cancel', terminate: 'Terminate' };

// showRunActions puts in box the buttons of r's actions, in order.
function showRunActions(box, r) {
  const id = runID(r);
  const want = runActions(r);
  const have = Array.from(box.querySelectorAll('button')).map((b) => b.dataset.action);
  if (have.join() === want.join()) return;
  box.replaceChildren(...want.map((a) => el('button', {
    type: 'button', class: a, 'data-action': a,
    onclick: () => (a === 'cancel' ? cancelRun(id) : controlRun(id, a)),
  }, ACTION_LABELS[a] || a)));
}

function controlRun(id, action) {
  return act(`${action} run ${id}`, async () => {
    const r = await api('POST', `/v1/runs/${enc(id)}/${action}`, {});
    if (state.tab === 'runs') loadRuns();
    return `status ${(r && r.status) || action}`;
  });
}

function pretty(v) {
  if (v === undefined || v === null) return '';
  return typeof v === 'string' ? v : JSON.stringify(v, null, 1);
}

function codeCell(tr, col, v) {
  const td = tr.querySelector(`td.${col}`);
  const text = pretty(v);
  if (td.textContent === text) return;
  td.replaceChildren(text ? el('pre', {}, text) : '');
}

// showRunDetail fills the run page: status, input, output or error, the
// actions that apply, and one row per attempt of each step.
function showRunDetail(run) {
  const st = $('#run-detail-status');
  st.textContent = run.status || '';
  st.className = 'status-' + (run.status || 'unknown');
  showRunActions($('#run-actions'), Object.assign({ id: runID(run) || state.arg }, run));
  const facts = [];
  // The version the run is pinned to: it finishes on that version's code.
  if (run.workflow) facts.push(['Workflow', run.version ? `${run.workflow} v${run.version}` : run.workflow]);
  if (run.input !== undefined) facts.push(['Input', pretty(run.input)]);
  if (run.output !== undefined && run.output !== null) facts.push(['Output', pretty(run.output)]);
  if (run.error) facts.push(['Error', run.error]);
  // Its search attributes (workflow.WithAttributes, SetAttributes).
  const attrs = Object.keys(run.attributes || {}).sort().map((k) => `${k}=${run.attributes[k]}`);
  if (attrs.length) facts.push(['Attributes', attrs.join(' ')]);
  // What the run published (workflow.SetEvent), the latest per key.
  for (const k of Object.keys(run.values || {}).sort()) facts.push([`Published ${k}`, pretty(run.values[k])]);
  $('#run-facts').replaceChildren(...facts.map(([k, v]) => el('div', {}, el('dt', {}, k), el('dd', {}, el('pre', {}, v)))));
  const rows = [];
  const steps = Array.isArray(run.timeline) ? run.timeline : [];
  for (const s of steps) {
    for (const a of Array.isArray(s.attempts) ? s.attempts : []) rows.push(Object.assign({ step: s.id }, a));
  }
  syncRows($('#attempts tbody'), rows, (a) => `${a.step}#${a.attempt}`, makeAttemptRow, updateAttemptRow);
}

function makeAttemptRow(a) {
  const tr = el('tr', {}, ...cells('step', 'attempt', 'status', 'started', 'duration', 'input', 'output', 'error'));
  tr.querySelector('td.step').textContent = a.step;
  tr.querySelector('td.attempt').textContent = String(a.attempt);
  return tr;
}

function updateAttemptRow(tr, a) {
  setCell(tr, 'status', a.status || '', 'status-' + (a.status || 'unknown'));
  setTime(tr, 'started', a.started_at);
  setCell(tr, 'duration', fmtDuration(durationOf(a)));
  const input = a.input !== undefined ? a.input : a.started;
  codeCell(tr, 'input', a.effect_kind ? { kind: a.effect_kind, params: input } : input);
  codeCell(tr, 'output', a.output);
  setCell(tr, 'error', a.error || (a.failure && a.failure.error) || '', a.error ? 'bad' : '');
}

// ---- effects and timers across worlds, paged by the API's cursor ----

// queuePages keeps, per list, the cursor of each page read so far (the
// first is ''), the page shown, and the next page's cursor.
const queuePages = {
  effects: { cursors: [''], page: 0, next: '' },
  timers: { cursors: [''], page: 0, next: '' },
};

function resetQueuePages() {
  for (const p of Object.values(queuePages)) Object.assign(p, { cursors: [''], page: 0, next: '' });
}

function effectsQuery(world) {
  const p = queuePages.effects;
  const q = new URLSearchParams({ limit: String(LIST_PAGE) });
  if (world) q.set('world', world);
  if (filterValue('effects-kind')) q.set('kind', filterValue('effects-kind'));
  if (filterValue('effects-status')) q.set('status', filterValue('effects-status'));
  if (p.cursors[p.page]) q.set('after', p.cursors[p.page]);
  return '/v1/effects?' + q;
}

function timersQuery(world) {
  const p = queuePages.timers;
  const q = new URLSearchParams({ limit: String(LIST_PAGE) });
  if (world) q.set('world', world);
  if (filterValue('timers-status')) q.set('status', filterValue('timers-status'));
  if (p.cursors[p.page]) q.set('after', p.cursors[p.page]);
  return '/v1/timers?' + q;
}

// showQueuePage records a page's next cursor and shows where it is.
function showQueuePage(list, rows, next) {
  const p = queuePages[list];
  p.next = next || '';
  const from = p.page * LIST_PAGE;
  $(`#${list}-page`).textContent = rows.length ? `${from + 1}–${from + rows.length}${p.next ? '' : ' (last)'}` : 'none';
  $(`#${list}-prev`).disabled = p.page === 0;
  $(`#${list}-next`).disabled = !p.next;
}

function turnQueuePage(list, by) {
  const p = queuePages[list];
  if (by > 0) {
    if (!p.next) return;
    p.cursors[p.page + 1] = p.next;
    p.page++;
  } else if (p.page > 0) {
    p.page--;
  }
  loadWorldQueues(state.arg);
}

function setWorldCell(tr, world) {
  const td = tr.querySelector('td.world');
  if (td.textContent === world) return;
  td.replaceChildren(el('a', { href: '#queues/' + enc(world) }, world));
}

// ---- wiring ----

function listsInit() {
  for (const list of ['worlds', 'workers', 'runs']) {
    for (const f of document.querySelectorAll(`#${list}-filters input, #${list}-filters select`)) {
      f.addEventListener('input', () => {
        listPages[list] = 0;
        render();
      });
    }
    $(`#${list}-prev`).addEventListener('click', () => {
      listPages[list] = Math.max(0, listPages[list] - 1);
      render();
    });
    $(`#${list}-next`).addEventListener('click', () => {
      listPages[list]++;
      render();
    });
  }
  for (const list of ['effects', 'timers']) {
    for (const f of document.querySelectorAll(`#${list}-filters input, #${list}-filters select`)) {
      f.addEventListener('input', () => {
        resetQueuePages();
        loadWorldQueues(state.arg);
      });
    }
    $(`#${list}-prev`).addEventListener('click', () => turnQueuePage(list, -1));
    $(`#${list}-next`).addEventListener('click', () => turnQueuePage(list, 1));
  }
  setInterval(refreshTimes, 15000);
}
