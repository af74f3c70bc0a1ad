// The world page (#world/ID): one world as a person debugs it. Its
// record, lease and lineage; its state now or at any past height, with a
// fork from that height; its pending effects and timers; and its journal,
// paged, each record expandable into the input it consumed, the reply it
// gave and the effects, timers and sends it made (the API's
// journal?detail=true).
//
// It is loaded before app.js and uses app.js's helpers (api, el, enc,
// fmtTime, short, notify, act, ApiError) only when called, after both have
// run. Everything of its own stays inside this function, so that it
// declares no global name but worldPage, which app.js's router calls:
// open(id) when #world/ID is shown, close() when another page is, and
// changed(view) when the event stream brings the world's new view.
'use strict';

window.worldPage = (function () {
  const PAGE = 20; // journal records a page
  const page = {
    id: '',
    view: null,
    after: null, // the journal page starts after this height; null: the newest page
    limit: 0, // and holds this many records at most
    stateAt: null, // the height the state panel shows; null: the head
    ticker: null, // refreshes relative times
    gen: 0, // bumped by open and close: a late answer for another page is dropped
    reload: null,
  };

  const q = (sel) => document.querySelector(sel);

  // ---- times: absolute (UTC, as the rest of the dashboard) and relative ----

  function relative(iso, now) {
    const t = Date.parse(iso);
    if (isNaN(t)) return '';
    const d = t - now;
    const a = Math.abs(d);
    let s;
    if (a < 1000) return 'now';
    if (a < 60000) s = Math.round(a / 1000) + ' s';
    else if (a < 3600000) s = Math.round(a / 60000) + ' min';
    else if (a < 86400000) s = Math.round(a / 3600000) + ' h';
    else s = Math.round(a / 86400000) + ' d';
    return d > 0 ? 'in ' + s : s + ' ago';
  }

  // when is a time shown both ways: "2026-11-28 02:40:01Z (in 8 s)"; the
  // relative part follows the clock while the page is open.
  function when(iso) {
    if (!iso) return el('span', { class: 'when' }, '–');
    const span = el('span', { class: 'when', 'data-t': iso, title: iso });
    span.textContent = `${fmtTime(iso)} (${relative(iso, Date.now())})`;
    return span;
  }

  function tick() {
    const now = Date.now();
    for (const s of document.querySelectorAll('#world-page .when[data-t]')) {
      const text = `${fmtTime(s.dataset.t)} (${relative(s.dataset.t, now)})`;
      if (s.textContent !== text) s.textContent = text;
    }
  }

  function pretty(v) {
    return JSON.stringify(v, null, 2);
  }

  function errText(e) {
    return e instanceof ApiError ? e.toString() : e.message;
  }

  // ---- the page's skeleton, built once ----

  function build() {
    const root = q('#world-page');
    if (root.dataset.built) return;
    root.dataset.built = '1';
    root.append(
      el('h2', { id: 'wp-title' }),
      el('div', { class: 'wp-cards' },
        el('section', { class: 'wp-card', id: 'wp-record' },
          el('h3', {}, 'World'),
          el('dl', {},
            el('dt', {}, 'Universe'), el('dd', { id: 'wp-universe' }),
            el('dt', {}, 'Status'), el('dd', { id: 'wp-status' }),
            el('dt', {}, 'Head'), el('dd', { id: 'wp-head' }),
            el('dt', {}, 'Journal floor'), el('dd', { id: 'wp-floor' }),
            el('dt', {}, 'Version'), el('dd', { id: 'wp-version' }),
            el('dt', {}, 'Inbox'), el('dd', { id: 'wp-inbox' }),
            el('dt', {}, 'Created'), el('dd', { id: 'wp-created' })),
          el('p', { class: 'wp-actions' },
            el('button', { type: 'button', id: 'wp-pause', onclick: () => setStatus(page.id, 'pause') }, 'Pause'),
            el('button', { type: 'button', id: 'wp-resume', onclick: () => setStatus(page.id, 'resume') }, 'Resume'),
            el('a', { id: 'wp-queues-link' }, 'Queues tab'))),
        el('section', { class: 'wp-card', id: 'wp-lease' },
          el('h3', {}, 'Lease'),
          el('dl', {},
            el('dt', {}, 'Holder'), el('dd', { id: 'wp-lease-holder' }),
            el('dt', {}, 'Epoch'), el('dd', { id: 'wp-lease-epoch' }),
            el('dt', {}, 'Expires'), el('dd', { id: 'wp-lease-expires' }),
            el('dt', {}, 'Placed on'), el('dd', { id: 'wp-assignment' }))),
        el('section', { class: 'wp-card', id: 'wp-lineage' },
          el('h3', {}, 'Lineage'),
          el('dl', {},
            el('dt', {}, 'Forked from'), el('dd', { id: 'wp-parent' }),
            el('dt', {}, 'Forks'), el('dd', { id: 'wp-forks' })))),
      el('section', { class: 'wp-card wp-wide', id: 'wp-state-card' },
        el('h3', {}, 'State ', el('small', { id: 'wp-state-label' })),
        el('form', { id: 'wp-state-form', class: 'wp-inline' },
          el('label', {}, 'At height ', el('input', { id: 'wp-state-height', type: 'number', min: '0', placeholder: 'head' })),
          el('button', { type: 'submit', id: 'wp-state-show' }, 'Show'),
          el('button', { type: 'button', id: 'wp-state-current' }, 'Current')),
        el('pre', { id: 'wp-state', class: 'wp-json' }),
        el('form', { id: 'wp-fork-form', class: 'wp-inline' },
          el('span', { id: 'wp-fork-label' }),
          el('label', {}, 'New world ', el('input', { id: 'wp-fork-id', required: '', placeholder: 'id of the fork' })),
          el('button', { type: 'submit', id: 'wp-fork-go' }, 'Fork from this height'))),
      el('section', { class: 'wp-card wp-wide' },
        el('h3', {}, 'Pending effects'),
        el('table', { id: 'wp-effects' },
          el('thead', {}, el('tr', {}, ...['Intent', 'Kind', 'State', 'Attempt', 'Retries', 'Enqueued', 'Claimed by', 'Claim expires'].map((h) => el('th', {}, h)))),
          el('tbody')),
        el('p', { id: 'wp-effects-empty', class: 'empty', hidden: '' }, 'No pending, inflight or held effects.'),
        el('h3', {}, 'Timers'),
        el('table', { id: 'wp-timers' },
          el('thead', {}, el('tr', {}, ...['Intent', 'Due', 'State', 'Attempt', 'Claimed by'].map((h) => el('th', {}, h)))),
          el('tbody')),
        el('p', { id: 'wp-timers-empty', class: 'empty', hidden: '' }, 'No timers.')),
      el('section', { class: 'wp-card wp-wide' },
        el('h3', {}, 'Journal ', el('small', { id: 'wp-page-label' })),
        el('p', { class: 'wp-inline' },
          el('button', { type: 'button', id: 'wp-newest', onclick: () => showPage(null) }, 'Newest'),
          el('button', { type: 'button', id: 'wp-newer', onclick: () => newer() }, 'Newer'),
          el('button', { type: 'button', id: 'wp-older', onclick: () => older() }, 'Older')),
        el('table', { id: 'wp-journal' },
          el('thead', {}, el('tr', {}, ...['', 'Height', 'Persisted', 'Input', 'Type', 'Outcome', 'Did', ''].map((h) => el('th', {}, h)))),
          el('tbody')),
        el('p', { id: 'wp-journal-empty', class: 'empty', hidden: '' }, 'No records.')),
    );
    q('#wp-state-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const v = q('#wp-state-height').value.trim();
      loadState(v === '' ? null : Number(v));
    });
    q('#wp-state-current').addEventListener('click', () => {
      q('#wp-state-height').value = '';
      loadState(null);
    });
    q('#wp-fork-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      forkHere();
    });
  }

  // ---- the record, lease and lineage ----

  function showView(v) {
    page.view = v;
    q('#wp-title').textContent = `World ${v.id}`;
    q('#wp-universe').textContent = v.universe || '';
    const status = q('#wp-status');
    status.textContent = v.status + (v.status_reason ? ` (${v.status_reason})` : '');
    status.className = 'status-' + v.status;
    q('#wp-head').textContent = String(v.head);
    q('#wp-floor').textContent = String(v.journal_floor || 0);
    // The definition version the world is on, and an upgrade waiting in
    // its inbox (orrery world upgrade).
    q('#wp-version').textContent = (v.version ? `v${v.version}` : 'not started') +
      (v.pending_upgrade ? `, upgrade to v${v.pending_upgrade} pending` : '');
    q('#wp-inbox').textContent = v.inbox_depth === undefined ? '' :
      `${v.inbox_depth}${v.inbox_depth_more ? '+' : ''} waiting` + (v.inbox_cursor !== undefined ? `, cursor ${v.inbox_cursor}` : '');
    q('#wp-created').replaceChildren(when(v.created_at));
    q('#wp-pause').hidden = v.status !== 'active';
    q('#wp-resume').hidden = v.status !== 'paused';
    q('#wp-queues-link').setAttribute('href', '#queues/' + enc(v.id));
    const l = v.lease;
    q('#wp-lease-holder').textContent = l ? l.holder || '(released)' : '(never leased)';
    q('#wp-lease-holder').title = l && l.incarnation ? 'incarnation ' + l.incarnation : '';
    q('#wp-lease-epoch').textContent = l ? String(l.epoch) : '–';
    q('#wp-lease-expires').replaceChildren(l && l.holder ? when(l.expires_at) : '–');
    q('#wp-assignment').textContent = v.assignment ? v.assignment.worker + (v.assignment.reason ? ` (${v.assignment.reason})` : '') : '(not placed)';
    const parent = q('#wp-parent');
    if (v.lineage) {
      parent.replaceChildren(el('a', { href: '#world/' + enc(v.lineage.parent) }, v.lineage.parent),
        ` at height ${v.lineage.forked_at_height}`);
      parent.title = 'parent snapshot ' + v.lineage.parent_snapshot_hash;
    } else {
      parent.textContent = '(not a fork)';
    }
  }

  async function loadView(gen) {
    const v = await api('GET', `/v1/worlds/${enc(page.id)}`);
    if (gen !== page.gen) return;
    showView(v);
  }

  async function loadForks(gen) {
    const data = await api('GET', `/v1/worlds/${enc(page.id)}/forks`);
    if (gen !== page.gen) return;
    const box = q('#wp-forks');
    const forks = data.worlds || [];
    if (!forks.length) {
      box.textContent = '(none)';
      return;
    }
    const items = [];
    forks.forEach((f, i) => {
      if (i) items.push(', ');
      items.push(el('a', { href: '#world/' + enc(f.id), class: 'wp-fork' }, f.id), ` @${f.lineage ? f.lineage.forked_at_height : '?'}`);
    });
    box.replaceChildren(...items);
  }

  function setStatus(id, action) {
    act(`${action} ${id}`, async () => {
      const rec = await api('POST', `/v1/worlds/${enc(id)}/${action}`, { reason: 'from the world page' });
      if (page.id === id) loadView(page.gen).catch(() => {});
      return `status ${rec.status}`;
    });
  }

  // ---- state, now or at a height, and a fork from there ----

  async function loadState(height) {
    const gen = page.gen;
    const label = q('#wp-state-label');
    const path = `/v1/worlds/${enc(page.id)}/state` + (height === null ? '' : `?height=${height}`);
    try {
      const s = await api('GET', path);
      if (gen !== page.gen) return;
      page.stateAt = height;
      q('#wp-state').textContent = pretty(s.state);
      q('#wp-state').classList.remove('error');
      label.textContent = `at height ${s.height}${height === null ? ' (the head)' : ''}, hash ${short(s.hash)}`;
      label.title = s.hash;
      q('#wp-state-height').value = height === null ? '' : String(height);
      q('#wp-fork-label').textContent = `Fork at height ${s.height}:`;
      q('#wp-fork-form').dataset.height = String(s.height);
    } catch (e) {
      if (gen !== page.gen) return;
      q('#wp-state').textContent = errText(e);
      q('#wp-state').classList.add('error');
      label.textContent = height === null ? '' : `at height ${height}`;
      delete q('#wp-fork-form').dataset.height;
      q('#wp-fork-label').textContent = 'No state to fork from.';
    }
  }

  function forkHere() {
    const src = page.id;
    const height = q('#wp-fork-form').dataset.height;
    const id = q('#wp-fork-id').value.trim();
    if (height === undefined || !id) return;
    return act(`fork ${src} at ${height} → ${id}`, async () => {
      const rec = await api('POST', `/v1/worlds/${enc(src)}/fork`, { id, height: Number(height) });
      if (page.id === src) loadForks(page.gen).catch(() => {});
      q('#wp-fork-id').value = '';
      return `${rec.id} created at height ${rec.lineage ? rec.lineage.forked_at_height : height}`;
    });
  }

  // ---- pending effects and timers ----

  function fill(tbody, rows) {
    tbody.replaceChildren(...rows);
  }

  function cellsOf(...values) {
    return values.map((v) => (v instanceof Node ? el('td', {}, v) : el('td', {}, String(v === undefined || v === null ? '' : v))));
  }

  async function loadQueues(gen) {
    const [eff, tim] = await Promise.all([
      api('GET', `/v1/effects?world=${enc(page.id)}`),
      api('GET', `/v1/timers?world=${enc(page.id)}`),
    ]);
    if (gen !== page.gen) return;
    const effects = eff.effects || [];
    q('#wp-effects-empty').hidden = effects.length > 0;
    fill(q('#wp-effects tbody'), effects.map((e) => {
      const tr = el('tr', { 'data-id': e.intent_hash }, ...cellsOf(short(e.intent_hash), e.kind, e.state, e.attempt, e.retries,
        when(e.enqueued_at), e.claimed_by || '', e.claimed_by ? when(e.claim_expires) : ''));
      tr.firstChild.title = e.intent_hash;
      // A held effect waits for an operator: it stands out, its reason a hover away.
      const stateTd = tr.children[2];
      stateTd.className = 'state-' + e.state;
      if (e.state === 'held') stateTd.title = `held: ${e.hold_reason || 'no reason given'}`;
      return tr;
    }));
    const timers = tim.timers || [];
    q('#wp-timers-empty').hidden = timers.length > 0;
    fill(q('#wp-timers tbody'), timers.map((t) => {
      const tr = el('tr', { 'data-id': t.intent_hash }, ...cellsOf(short(t.intent_hash), when(t.deliver_at), t.state, t.attempt, t.claimed_by || ''));
      tr.firstChild.title = t.intent_hash;
      return tr;
    }));
  }

  // ---- the journal: pages of records, each expandable ----

  // did summarises what a step did, for its row.
  function did(r) {
    const parts = [];
    if (r.reply) parts.push(r.reply.error ? 'reply: error' : 'reply');
    if (r.receipt) parts.push(`receipt ${r.receipt.status}`);
    const n = (xs, one) => {
      if (xs && xs.length) parts.push(`${xs.length} ${one}${xs.length > 1 ? 's' : ''}`);
    };
    n(r.intents, 'effect');
    n(r.timers, 'timer');
    n(r.sends, 'send');
    n(r.cancels, 'cancel');
    return parts.join(' · ');
  }

  // detailOf is a record's expanded detail: one block a thing.
  function detailOf(r) {
    const blocks = [];
    const block = (title, value, cls) => {
      blocks.push(el('div', { class: 'wp-block ' + (cls || '') }, el('h4', {}, title),
        el('pre', { class: 'wp-json' }, typeof value === 'string' ? value : pretty(value))));
    };
    if (r.input) {
      const inp = { kind: r.input.kind, seq: r.input.seq, type: r.input.type, enqueued_at: r.input.enqueued_at };
      if (r.input.timer) inp.timer = r.input.timer;
      if (r.input.cause) inp.cause = r.input.cause;
      block('Input', inp, 'wp-input-meta');
      if (r.input.value !== undefined) block('Input value', r.input.value, 'wp-input');
    }
    if (r.receipt) block('Receipt: the effect it answers', r.receipt, 'wp-receipt');
    if (r.error) block('Error', r.error, 'wp-error');
    if (r.reply) block('Reply', r.reply.error ? { call_id: r.reply.call_id, error: r.reply.error } : { call_id: r.reply.call_id, value: r.reply.value }, 'wp-reply');
    if (r.intents) block('Effects asked for', r.intents.map((i) => ({ intent_hash: i.intent_hash, kind: i.kind, params: i.params })), 'wp-intents');
    if (r.timers) block('Timers set', r.timers, 'wp-timers-set');
    if (r.cancels) block('Timers cancelled', r.cancels, 'wp-cancels');
    if (r.sends) block('Messages sent', r.sends, 'wp-sends');
    if (r.derive_error) block('Not derived', r.derive_error, 'wp-error');
    else if (r.derived && !r.reply && !r.intents && !r.timers && !r.cancels && !r.sends) {
      blocks.push(el('p', { class: 'hint' }, 'The step made no effects, timers or sends.'));
    }
    blocks.push(el('p', { class: 'hint' }, `event ${r.event_id} · step ${r.step_id} · state hash ${r.state_hash}`));
    return blocks;
  }

  function recordRows(r) {
    const toggle = el('button', { type: 'button', class: 'wp-expand', title: 'show the payloads' }, '▸');
    const at = el('button', { type: 'button', class: 'wp-state-here', title: 'the state after this step' }, 'State here');
    const outcome = el('td', { class: 'outcome outcome-' + (r.outcome || 'none') }, r.outcome || '');
    if (r.error) outcome.title = r.error;
    const tr = el('tr', { 'data-id': String(r.height), class: 'wp-record' },
      el('td', {}, toggle), el('td', { class: 'height' }, String(r.height)), el('td', { class: 'persisted' }, when(r.persisted_at)),
      el('td', { class: 'input' }, r.input ? `${r.input.kind} #${r.input.seq}` : r.event_type),
      el('td', { class: 'type' }, (r.input && r.input.type) || ''), outcome,
      el('td', { class: 'did' }, did(r)), el('td', {}, at));
    const detail = el('tr', { class: 'wp-detail', 'data-for': String(r.height), hidden: '' },
      el('td', { colspan: '8' }, ...detailOf(r)));
    toggle.addEventListener('click', () => {
      detail.hidden = !detail.hidden;
      toggle.textContent = detail.hidden ? '▸' : '▾';
      tr.classList.toggle('open', !detail.hidden);
    });
    at.addEventListener('click', () => {
      loadState(r.height);
      q('#wp-state-card').scrollIntoView({ block: 'nearest' });
    });
    return [tr, detail];
  }

  async function loadJournal(gen) {
    const v = page.view;
    if (!v) return;
    // A fork's journal starts after its fork point; below it the history
    // is its parent's.
    const floor = Math.max(v.journal_floor || 0, v.lineage ? v.lineage.forked_at_height : 0);
    const after = page.after === null ? Math.max(floor, v.head - PAGE) : Math.max(floor, page.after);
    const limit = page.after === null ? PAGE : Math.max(1, Math.min(PAGE, page.limit));
    const data = await api('GET', `/v1/worlds/${enc(page.id)}/journal?detail=true&after=${after}&limit=${limit}`);
    if (gen !== page.gen) return;
    const recs = data.records || [];
    // The newest first, each with its (hidden) detail below it; rows
    // already open stay open.
    const open = new Set(Array.from(document.querySelectorAll('#wp-journal tr.wp-record.open')).map((t) => t.dataset.id));
    const rows = [];
    for (const r of recs.slice().reverse()) {
      const [tr, detail] = recordRows(r);
      if (open.has(tr.dataset.id)) tr.querySelector('button.wp-expand').click();
      rows.push(tr, detail);
    }
    q('#wp-journal tbody').replaceChildren(...rows);
    const empty = q('#wp-journal-empty');
    empty.hidden = recs.length > 0;
    empty.textContent = v.lineage && v.head === v.lineage.forked_at_height
      ? `No records of its own yet: its history up to height ${v.lineage.forked_at_height} is ${v.lineage.parent}'s.`
      : 'No records.';
    const lo = recs.length ? recs[0].height : after;
    const hi = recs.length ? recs[recs.length - 1].height : after;
    q('#wp-page-label').textContent = recs.length ? `heights ${lo}–${hi} of ${v.head}` + (floor ? `; up to ${floor} compacted` : '') : '';
    q('#wp-journal').dataset.lo = String(lo);
    q('#wp-journal').dataset.hi = String(hi);
    q('#wp-older').disabled = !recs.length || lo <= floor + 1;
    q('#wp-newer').disabled = !recs.length || hi >= v.head;
    q('#wp-newest').disabled = page.after === null;
  }

  // showPage shows the records after `after`, at most limit of them
  // (pages never overlap: Older stops where the page shown starts).
  function showPage(after, limit) {
    page.after = after;
    page.limit = limit || PAGE;
    loadJournal(page.gen).catch((e) => notify(`journal of ${page.id}: ${errText(e)}`, true));
  }

  function older() {
    const lo = Number(q('#wp-journal').dataset.lo || 0);
    const v = page.view || {};
    const floor = Math.max(v.journal_floor || 0, v.lineage ? v.lineage.forked_at_height : 0);
    const after = Math.max(floor, lo - 1 - PAGE);
    showPage(after, lo - 1 - after);
  }

  function newer() {
    const hi = Number(q('#wp-journal').dataset.hi || 0);
    const head = page.view ? page.view.head : hi;
    showPage(hi + PAGE >= head ? null : hi);
  }

  // ---- the router's hooks ----

  function open(id) {
    build();
    close();
    page.id = id;
    page.after = null;
    page.stateAt = null;
    page.view = null;
    const gen = ++page.gen;
    q('#wp-title').textContent = `World ${id}`;
    for (const sel of ['#wp-journal tbody', '#wp-effects tbody', '#wp-timers tbody']) q(sel).replaceChildren();
    q('#wp-state').textContent = '';
    q('#wp-fork-id').value = '';
    page.ticker = setInterval(tick, 1000);
    loadView(gen)
      .then(() => Promise.all([loadJournal(gen), loadState(null), loadQueues(gen), loadForks(gen)]))
      .catch((e) => {
        if (gen === page.gen) notify(`world ${id}: ${errText(e)}`, true);
      });
  }

  function close() {
    page.gen++;
    if (page.ticker) clearInterval(page.ticker);
    page.ticker = null;
    if (page.reload) clearTimeout(page.reload);
    page.reload = null;
  }

  // changed takes the world's new view from the event stream: the record
  // and lease at once, and, once for a burst of events, the queues, the
  // newest journal page and the current state.
  function changed(v) {
    if (v.id !== page.id || !page.view) return;
    const grew = v.head !== page.view.head;
    showView(Object.assign({}, page.view, v));
    if (page.reload) return;
    const gen = page.gen;
    page.reload = setTimeout(() => {
      page.reload = null;
      if (gen !== page.gen) return;
      loadQueues(gen).catch(() => {});
      if (grew && page.after === null) loadJournal(gen).catch(() => {});
      if (grew && page.stateAt === null) loadState(null);
    }, 0);
  }

  return { open, close, changed };
})();
