// queen's dashboard: plain JavaScript, no build step, no library. Each page
// reads the broker's HTTP API and renders into <main>; the page re-renders
// every REFRESH_MS (live), but for a form (FORM_PAGES). Actions are shown
// only when GET /api/v1/session says the token may take them; the routes
// check again.
'use strict';

// REFRESH_MS is 5 s; ?refresh=<ms> (at least 100) changes it, for the
// browser test that types through refresh ticks.
const REFRESH_MS = Math.max(100, Number(new URLSearchParams(location.search).get('refresh')) || 5000);
// FORM_PAGES hold inputs the user types into: the refresh tick leaves them
// alone (a re-render replaced the Settings form every 5 s and wiped a
// token half typed). They render on navigation and after their own save.
const FORM_PAGES = new Set(['settings']);
// RANGES are the time ranges the header offers; the choice is kept in
// localStorage so a reload, or the next visit, shows the same window.
const RANGES = { '1h': [3600e3, '1 h'], '6h': [6 * 3600e3, '6 h'], '24h': [24 * 3600e3, '24 h'], '7d': [7 * 24 * 3600e3, '7 d'] };
const Q = {
  token: localStorage.getItem('queen.token') || '',
  tenant: localStorage.getItem('queen.tenant') || '',
  range: RANGES[localStorage.getItem('queen.range')] ? localStorage.getItem('queen.range') : '1h',
  session: null,
  route: null,
  timer: null,
  state: {}, // per page: pager offsets, armed buttons
};

// ---------- HTTP ----------

async function api(path, opts) {
  opts = opts || {};
  const headers = {};
  if (opts.body !== undefined) headers['Content-Type'] = 'application/json';
  if (Q.token) headers['Authorization'] = 'Bearer ' + Q.token;
  if (Q.tenant) headers['x-queen-tenant'] = Q.tenant;
  const res = await fetch(path, {
    method: opts.method || 'GET', headers,
    body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
  });
  if (res.status === 204) return null;
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = { error: text }; }
  if (!res.ok) {
    const err = new Error((data && data.error) || res.statusText || ('HTTP ' + res.status));
    err.status = res.status;
    throw err;
  }
  return data;
}

// ---------- DOM ----------

function h(tag, attrs) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'text') el.textContent = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (let i = 2; i < arguments.length; i++) append(el, arguments[i]);
  return el;
}

function append(el, child) {
  if (child === undefined || child === null || child === false) return;
  if (Array.isArray(child)) { child.forEach((c) => append(el, c)); return; }
  el.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
}

function card(title) {
  const rest = Array.prototype.slice.call(arguments, 1);
  return h('section', { class: 'card' }, title ? h('h2', { text: title }) : null, rest);
}

function table(headers, rows, empty) {
  if (!rows.length) return h('p', { class: 'muted', text: empty || 'Nothing yet.' });
  return h('table', {},
    h('thead', {}, h('tr', {}, headers.map((c) => h('th', { class: c.num ? 'num' : '', text: c.label || c })))),
    h('tbody', {}, rows.map((r) => h('tr', {}, r.map((v, i) => h('td', { class: headers[i] && headers[i].num ? 'num' : '' }, v))))));
}

function tile(label, value) {
  return h('div', { class: 'card tile' }, h('div', { class: 'value', text: fmt(value) }), h('div', { class: 'label', text: label }));
}

function fmt(v) {
  if (v === null || v === undefined) return '—';
  if (typeof v === 'number') return Number.isInteger(v) ? v.toLocaleString('en-US') : v.toLocaleString('en-US', { maximumFractionDigits: 2 });
  return String(v);
}

// dur is a number of seconds as a person reads it: 45 s, 10 min, 2.5 h, 3 d.
function dur(secs) {
  if (secs === null || secs === undefined) return '—';
  const units = [[86400, 'd'], [3600, 'h'], [60, 'min']];
  for (const [n, u] of units) if (secs >= n) return fmt(+(secs / n).toPrecision(2)) + ' ' + u;
  return fmt(Math.round(secs)) + ' s';
}

// secs turns chart points in milliseconds into seconds (lag axes read
// 806 s, not 806,000).
function secs(points) { return points.map(([t, v]) => [t, v / 1000]); }

function when(ms) {
  if (!ms) return '—';
  const d = new Date(ms);
  return isNaN(d) ? String(ms) : d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

function badge(text, kind) { return h('span', { class: 'badge ' + (kind || ''), text }); }

function link(text, href) { return h('a', { href, text }); }

// action is a button for a write the session may take (level 'write' or
// 'admin'), else nothing. A destructive one needs a second click.
function action(label, level, fn, opts) {
  opts = opts || {};
  const s = Q.session || {};
  if (level === 'admin' ? !s.canAdmin : !s.canWrite) return null;
  const key = opts.key || label;
  const armed = opts.confirm && Q.state.armed === key;
  const b = h('button', {
    class: 'action ' + (opts.confirm ? 'danger ' : '') + (armed ? 'armed' : ''), 'data-action': opts.name || label,
    text: armed ? 'Confirm ' + label.toLowerCase() : label,
    onclick: async () => {
      if (opts.confirm && !armed) { Q.state.armed = key; render(); return; }
      Q.state.armed = null;
      b.disabled = true;
      try { await fn(); flash(label + ': done'); } catch (e) { flash(label + ': ' + e.message, true); }
      render();
    },
  });
  return b;
}

function flash(text, bad) { Q.state.flash = { text, bad, at: Date.now() }; }

// ---------- charts (SVG) ----------

const SVG = 'http://www.w3.org/2000/svg';

function svg(tag, attrs) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  return el;
}

// chart draws series [{name, points: [[ms, value], ...]}] over [from, to].
function chart(title, series, from, to, unit) {
  const W = 600, H = 170, L = 44, B = 20, T = 8, R = 8;
  const all = series.flatMap((s) => s.points);
  const top = Math.max(0, ...all.map((p) => p[1])) || 1; // an all-zero chart still reads 0 to 1
  const x = (t) => L + (W - L - R) * (t - from) / Math.max(1, to - from);
  const y = (v) => T + (H - T - B) * (1 - v / top);
  const root = svg('svg', { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: 'none', role: 'img' });
  root.appendChild(svg('line', { class: 'axis', x1: L, y1: H - B, x2: W - R, y2: H - B }));
  root.appendChild(svg('line', { class: 'axis', x1: L, y1: T, x2: L, y2: H - B }));
  for (const [v, label] of [[top, fmt(+top.toPrecision(3))], [top / 2, fmt(+(top / 2).toPrecision(3))], [0, '0']]) {
    const t = svg('text', { x: L - 4, y: y(v) + 3, 'text-anchor': 'end' });
    t.textContent = label;
    root.appendChild(t);
  }
  for (const [t, anchor] of [[from, 'start'], [(from + to) / 2, 'middle'], [to, 'end']]) {
    const e = svg('text', { class: 'tick', x: x(t), y: H - 5, 'text-anchor': anchor });
    e.textContent = tickLabel(t, to - from);
    root.appendChild(e);
  }
  series.forEach((s, i) => {
    const pts = s.points.slice().sort((a, b) => a[0] - b[0]);
    if (pts.length === 1) {
      root.appendChild(svg('circle', { class: 'line s' + i, cx: x(pts[0][0]), cy: y(pts[0][1]), r: 3 }));
    } else if (pts.length > 1) {
      root.appendChild(svg('polyline', { class: 'line s' + i, points: pts.map((p) => x(p[0]).toFixed(1) + ',' + y(p[1]).toFixed(1)).join(' ') }));
    }
  });
  const points = series.reduce((n, s) => n + s.points.length, 0);
  return h('section', { class: 'card chart', 'data-chart': title, 'data-points': points, 'data-span': to - from },
    h('h2', { text: title + (unit ? ' (' + unit + ')' : '') }),
    points ? root : h('p', { class: 'muted', text: 'No recorded minutes in the last ' + RANGES[Q.range][1] + ' yet.' }),
    h('div', { class: 'legend' }, series.map((s, i) => h('span', { class: 'k' + i, text: '● ' + s.name }))));
}


// range is the chosen window ending now, with its query string (from, to)
// for the windowed routes and a label for titles.
function range() {
  const [span, label] = RANGES[Q.range] || RANGES['1h'];
  const to = Date.now();
  const from = to - span;
  return { from, to, span, label, qs: 'from=' + new Date(from).toISOString() + '&to=' + new Date(to).toISOString() };
}

// tickLabel reads an axis instant at the window's scale: the time of day
// within a day, the date and hour beyond (a 7 d axis of bare times read
// as one day).
function tickLabel(t, span) {
  const iso = new Date(t).toISOString();
  return span > 24 * 3600e3 ? iso.slice(5, 10) + ' ' + iso.slice(11, 16) : iso.slice(11, 16);
}

function setupRange() {
  const sel = document.getElementById('range');
  sel.replaceChildren(...Object.entries(RANGES).map(([k, [, label]]) => h('option', { value: k, text: label })));
  sel.value = Q.range;
  sel.addEventListener('change', () => {
    Q.range = RANGES[sel.value] ? sel.value : '1h';
    localStorage.setItem('queen.range', Q.range);
    render();
  });
}

// ---------- pages ----------

const OVERVIEW_QUEUES = 100;

async function overview() {
  const w = range();
  // A page of the newest queues: the whole list is counted live, which a
  // dashboard polling every few seconds must not ask of a large cluster.
  const [list, status] = await Promise.all([api('/api/v1/resources/queues?limit=' + OVERVIEW_QUEUES), api('/api/v1/status?' + w.qs)]);
  const qs = list.queues || [];
  const more = qs.length >= OVERVIEW_QUEUES;
  const tp = status.throughput || [];
  const pts = (k) => tp.map((b) => [Date.parse(b.timestamp), b[k] || 0]);
  const m = status.messages || {};
  return [
    h('h1', { text: 'Overview' }),
    h('div', { class: 'tiles' }, tile('queues', more ? OVERVIEW_QUEUES + '+' : qs.length), tile('messages', m.total), tile('pending', m.pending),
      tile('dead letters', m.deadLetter), tile('live leases', (status.leases || {}).active)),
    h('div', { class: 'grid' },
      chart('Throughput', [{ name: 'pushed', points: pts('ingestedPerSecond') }, { name: 'popped', points: pts('popPerSecond') },
        { name: 'acked', points: pts('processedPerSecond') }], w.from, w.to, 'msg/s'),
      chart('Lag', [{ name: 'average', points: secs(pts('avgLagMs')) }, { name: 'max', points: secs(pts('maxLagMs')) }], w.from, w.to, 's')),
    card(more ? 'Queues (the newest ' + OVERVIEW_QUEUES + ')' : 'Queues', table(['Queue', { label: 'Partitions', num: 1 }, { label: 'Messages', num: 1 }, { label: 'Pending', num: 1 },
      { label: 'Processing', num: 1 }, { label: 'DLQ', num: 1 }],
    qs.map((q) => [link(q.name, '#/queue/' + encodeURIComponent(q.name)), fmt(q.partitions), fmt(q.messages.total),
      fmt(q.messages.pending), fmt(q.messages.processing), fmt(q.messages.dlq)]), 'No queues yet.')),
  ];
}

// shownPartition leaves out the empty "Default" partition a queue is
// created with: a placeholder, not data (it is listed once it holds a
// message).
function shownPartition(p) { return !(p.name === 'Default' && !((p.messages || {}).total > 0)); }

async function queuePage(name) {
  const w = range();
  const st = Q.state.queue || (Q.state.queue = { offset: 0 });
  if (st.name !== name) { st.name = name; st.offset = 0; }
  const enc = encodeURIComponent(name);

  const [q, groups, msgs, ops] = await Promise.all([
    api('/api/v1/status/queues/' + enc),
    api('/api/v1/consumer-groups'),
    api('/api/v1/status/queues/' + enc + '/messages?limit=25&offset=' + st.offset + '&' + w.qs),
    api('/api/v1/analytics/queue-ops?queue=' + enc + '&' + w.qs),
  ]);
  const series = (ops.series || []).filter((b) => b.queueName === name);
  const pts = (k) => series.map((b) => [Date.parse(b.bucket), b[k] || 0]);
  const mine = (groups || []).filter((g) => g.queueName === name && g.name !== '__QUEUE_MODE__');
  const t = (q.totals && q.totals.messages) || q.totals || {};
  const list = msgs.messages || [];
  return [
    h('h1', {}, 'Queue ', h('code', { text: name })),
    h('div', { class: 'tiles' }, tile('messages', t.total), tile('pending', t.pending), tile('processing', t.processing),
      tile('completed', t.completed), tile('dead letters', t.deadLetter)),
    h('div', { class: 'grid' },
      chart('Queue throughput', [{ name: 'pushed', points: pts('pushPerSecond') }, { name: 'popped', points: pts('popPerSecond') },
        { name: 'acked', points: pts('ackPerSecond') }], w.from, w.to, 'msg/s'),
      chart('Queue lag', [{ name: 'average', points: secs(pts('avgLagMs')) }, { name: 'max', points: secs(pts('maxLagMs')) }], w.from, w.to, 's')),
    card('Partitions', table(['Partition', { label: 'Messages', num: 1 }, { label: 'Pending', num: 1 }, { label: 'Completed', num: 1 },
      { label: 'DLQ', num: 1 }, { label: 'Consumed', num: 1 }, 'Last activity'],
    (q.partitions || []).filter(shownPartition).map((p) => [p.name, fmt(p.messages.total), fmt(p.messages.pending), fmt(p.messages.completed),
      fmt(p.messages.deadLetter), fmt((p.cursor || {}).totalConsumed), when(p.lastActivity)]))),
    card('Consumer groups', table(['Group', { label: 'Partitions', num: 1 }, { label: 'Lagging', num: 1 }, { label: 'Behind (time)', num: 1 },
      { label: 'Behind (messages)', num: 1 }, 'State'],
      mine.map((g) => [link(g.name, '#/groups'), fmt(g.members), fmt(g.partitionsWithLag), dur(g.maxTimeLag), fmt(g.lagMessages),
        badge(g.state, g.state === 'Lagging' ? 'warn' : 'ok')]),
      'No group has consumed this queue.')),
    card('Messages (last ' + w.label + ', newest first)',
      table(['Transaction', 'Partition', 'Status', 'Created'],
        list.map((m) => [messageLink(m), m.partition, statusBadge(m.status), when(m.createdAt)]),
        'No messages in the last ' + w.label + '.'),
      h('div', { class: 'pager' },
        h('button', { disabled: st.offset === 0, text: '← newer', onclick: () => { st.offset = Math.max(0, st.offset - 25); render(); } }),
        h('span', { class: 'muted', text: 'from ' + (st.offset + 1) }),
        h('button', { disabled: list.length < 25, text: 'older →', onclick: () => { st.offset += 25; render(); } }))),
    h('p', {}, action('Delete queue', 'admin', async () => {
      await api('/api/v1/resources/queues/' + enc, { method: 'DELETE' });
      location.hash = '#/';
    }, { confirm: true, key: 'delete-queue-' + name, name: 'delete-queue' })),
  ];
}

// dlqFilters are the DLQ page's choices, kept in its state so a refresh
// renders them as they were; a change applies at once.
function dlqFilters(st, queues, groups) {
  const set = (k) => (e) => { st.f[k] = e.target.value; st.offset = 0; render(); };
  const opts = (values, label) => [h('option', { value: '', text: 'all' }),
    ...values.map((v) => h('option', { value: v, text: label ? label(v) : v }))];
  const sel = (id, k, values, label) => {
    const el = h('select', { id, onchange: set(k) }, opts(values, label));
    el.value = st.f[k];
    return el;
  };
  const at = (id, k) => h('input', { type: 'datetime-local', id, value: st.f[k], onchange: set(k) });
  return h('form', { class: 'inline filters', onsubmit: (e) => e.preventDefault() },
    h('label', { for: 'dlq-queue', text: 'Queue' }), sel('dlq-queue', 'queue', queues),
    h('label', { for: 'dlq-group', text: 'Group' }), sel('dlq-group', 'group', groups, groupName),
    h('label', { for: 'dlq-from', text: 'Failed from (local time)' }), at('dlq-from', 'from'),
    h('label', { for: 'dlq-to', text: 'to' }), at('dlq-to', 'to'));
}

// dlqQuery is the DLQ listing's filter query; the times typed are local.
function dlqQuery(f) {
  const p = new URLSearchParams();
  if (f.queue) p.set('queue', f.queue);
  if (f.group) p.set('consumerGroup', f.group);
  for (const k of ['from', 'to']) if (f[k] && !isNaN(new Date(f[k]))) p.set(k, new Date(f[k]).toISOString());
  return p.toString();
}

async function dlqPage() {
  const st = Q.state.dlq || (Q.state.dlq = { offset: 0, f: { queue: '', group: '', from: '', to: '' } });
  const w = range();
  const [d, list, groups, status] = await Promise.all([
    api('/api/v1/dlq?limit=50&offset=' + st.offset + '&' + dlqQuery(st.f)),
    api('/api/v1/resources/queues?limit=1000'),
    api('/api/v1/consumer-groups'),
    api('/api/v1/status?' + w.qs),
  ]);
  const rows = d.messages || [];
  const msgPath = (m) => '/api/v1/messages/' + encodeURIComponent(m.partitionId) + '/' + encodeURIComponent(m.transactionId);
  const groupNames = ['__QUEUE_MODE__', ...new Set((groups || []).map((g) => g.name).filter((g) => g !== '__QUEUE_MODE__'))];
  const top = (status.deadLetterQueue || {}).topErrors || [];
  return [
    h('h1', {}, 'Dead letters ', badge(fmt(d.total))),
    card(null, dlqFilters(st, (list.queues || []).map((q) => q.name), groupNames)),
    card(null, table(['Queue', 'Partition', 'Group', 'Transaction', 'Error', { label: 'Retries', num: 1 }, 'Failed', ''],
      rows.map((m) => [link(m.queue, '#/queue/' + encodeURIComponent(m.queue)), m.partition, groupName(m.consumerGroup), messageLink(m),
        m.errorMessage || '—', fmt(m.retryCount), when(m.failedAt),
        h('span', { class: 'row-actions', 'data-dlq': m.transactionId },
          action('Retry', 'write', () => api(msgPath(m) + '/retry', { method: 'POST', body: {} }), { key: 'retry-' + m.id + m.consumerGroup, name: 'retry' }), ' ',
          action('Delete', 'write', () => api(msgPath(m), { method: 'DELETE' }), { confirm: true, key: 'del-' + m.id + m.consumerGroup, name: 'delete' }))]),
      dlqQuery(st.f) ? 'No dead letter matches these filters.' : 'The dead-letter queue is empty.'),
    h('div', { class: 'pager' },
      h('button', { disabled: st.offset === 0, text: '← newer', onclick: () => { st.offset = Math.max(0, st.offset - 50); render(); } }),
      h('button', { disabled: rows.length < 50, text: 'older →', onclick: () => { st.offset += 50; render(); } }))),
    card('Top errors (the newest 1,000 dead letters of every queue)',
      table(['Error', { label: 'Dead letters', num: 1 }], top.map((e) => [e.error || '(no error message)', fmt(e.count)]), 'No dead letter.')),
  ];
}

// seekToTime is a time field and its button moving the group's cursors on
// the queue to the newest message stored at or before that time (before
// every message: the first, a replay), for a session that may write. The
// time typed is kept in the page's state across refreshes.
function seekToTime(g, path) {
  if (!(Q.session || {}).canWrite) return null;
  const times = Q.state.seekAt || (Q.state.seekAt = {});
  const key = g.name + '/' + g.queueName;
  const input = h('input', { type: 'datetime-local', 'data-seek': key, value: times[key] || '', title: 'local time',
    oninput: (e) => { times[key] = e.target.value; }, onchange: (e) => { times[key] = e.target.value; } });
  return h('span', { class: 'seek' }, input, ' ', action('Seek to time', 'write', () => {
    const at = new Date(times[key] || '');
    if (isNaN(at)) throw new Error('pick a time first');
    return api(path + '/seek', { method: 'POST', body: { timestamp: at.toISOString() } });
  }, { key: 'seekt-' + key, name: 'seek-time' }));
}

async function groupsPage() {
  const groups = await api('/api/v1/consumer-groups');
  const rows = (groups || []).filter((g) => g.name !== '__QUEUE_MODE__');
  const path = (g) => '/api/v1/consumer-groups/' + encodeURIComponent(g.name) + '/queues/' + encodeURIComponent(g.queueName);
  return [
    h('h1', { text: 'Consumer groups' }),
    card(null, table(['Group', 'Queue', { label: 'Partitions', num: 1 }, { label: 'Lagging', num: 1 }, { label: 'Behind (time)', num: 1 },
      { label: 'Behind (messages)', num: 1 }, 'State', 'Mode', ''],
      rows.map((g) => [g.name, link(g.queueName, '#/queue/' + encodeURIComponent(g.queueName)), fmt(g.members), fmt(g.partitionsWithLag),
        dur(g.maxTimeLag), fmt(g.lagMessages), badge(g.state, g.state === 'Lagging' ? 'warn' : g.state === 'Dead' ? '' : 'ok'), g.subscriptionMode || 'all',
        h('span', { class: 'row-actions' },
          action('Seek to end', 'write', () => api(path(g) + '/seek', { method: 'POST', body: { toEnd: true } }), { key: 'seek-' + g.name + g.queueName, name: 'seek' }), ' ',
          seekToTime(g, path(g)), ' ',
          action('Delete', 'admin', () => api(path(g) + '?deleteMetadata=true', { method: 'DELETE' }), { confirm: true, key: 'delg-' + g.name + g.queueName, name: 'delete-group' }))]),
      'No consumer group has consumed yet.')),
  ];
}

// groupName shows queue mode as what it is, never its internal name.
function groupName(g) { return g === '__QUEUE_MODE__' ? '(queue mode)' : g; }

// messagePage is #/message/<partitionId>/<transactionId>: the message's
// payload (text only, so a hostile payload stays text), its statuses,
// times and groups, and the actions the session may take.
async function messagePage(arg) {
  const cut = arg.indexOf('/');
  const pid = arg.slice(0, cut), txn = arg.slice(cut + 1);
  const path = '/api/v1/messages/' + encodeURIComponent(pid) + '/' + encodeURIComponent(txn);
  const [m, tr] = await Promise.all([api(path), api('/api/v1/traces/' + encodeURIComponent(pid) + '/' + encodeURIComponent(txn))]);
  const payload = m.payload !== undefined ? m.payload : m.data;
  const lease = m.leaseExpiresAt && Date.parse(m.leaseExpiresAt) > Date.now() ? when(m.leaseExpiresAt) : '—';
  return [
    h('h1', {}, 'Message ', h('code', { text: txn })),
    card(null, table(['', ''], [
      ['Queue', link(m.queue, '#/queue/' + encodeURIComponent(m.queue))], ['Partition', m.partition],
      ['Status', statusBadge(m.status)], ['Queue mode', statusBadge(m.queueStatus)],
      ['Trace id', m.traceId ? h('code', { text: m.traceId }) : '—'], ['Created', when(m.createdAt)], ['Lease expires', lease],
      ['Failed deliveries', fmt(m.retryCount)], ['Error', m.errorMessage || '—'], ['Producer', m.producerSub || '—'],
      ['Encrypted at rest', m.isEncrypted ? 'yes' : 'no'],
    ]), h('p', { class: 'row-actions' },
      m.status === 'dead_letter' ? action('Retry', 'write', () => api(path + '/retry', { method: 'POST', body: {} }), { key: 'retry-' + arg, name: 'retry' }) : null, ' ',
      action('Delete', 'write', async () => {
        await api(path, { method: 'DELETE' });
        location.hash = '#/queue/' + encodeURIComponent(m.queue);
      }, { confirm: true, key: 'del-' + arg, name: 'delete' }))),
    card('Consumer groups', table(['Group', 'Consumed', 'Lease expires'],
      (m.consumerGroups || []).map((g) => [groupName(g.name), g.consumed ? badge('yes', 'ok') : badge('no'), when(g.leaseExpiresAt)]), 'No group has a cursor on its partition.')),
    card('Payload', h('pre', { id: 'payload', class: 'payload', text: JSON.stringify(payload, null, 2) })),
    card('Trace events', eventTable(tr.traces || [], false)),
  ];
}

// byTime orders trace events oldest first (ties by id, as recorded).
function byTime(events) {
  return events.slice().sort((a, b) => (Date.parse(a.created_at) - Date.parse(b.created_at)) || String(a.id).localeCompare(String(b.id), 'en', { numeric: true }));
}

// eventRows are trace events as table rows, oldest first; withMessage adds
// the message each belongs to.
function eventTable(events, withMessage) {
  const head = ['Time', 'Event', withMessage ? 'Message' : null, withMessage ? 'Queue' : null, 'Group', 'Broker', 'Data'].filter((c) => c);
  return table(head, byTime(events).map((e) => [when(e.created_at), badge(e.event_type),
    withMessage ? messageLink({ partitionId: e.partition_id, transactionId: e.transaction_id }) : null,
    withMessage ? (e.queue_name || '—') + ' / ' + (e.partition_name || '—') : null,
    groupName(e.consumer_group), e.worker_id || '—', h('code', { text: JSON.stringify(e.data) })].filter((c) => c !== null)), 'No trace events.');
}

// tracesPage is #/traces (the trace names, most recent first, a name to
// look up) and #/traces/<name> (that trace's events in time order).
async function tracesPage(name) {
  const form = h('form', { class: 'inline', id: 'trace-form', onsubmit: (e) => {
    e.preventDefault();
    const v = form.querySelector('input').value.trim();
    if (v) location.hash = '#/traces/' + encodeURIComponent(v);
  } }, h('input', { type: 'text', id: 'trace-name', value: name || '', placeholder: 'a trace name', 'aria-label': 'Trace name' }), ' ', h('button', { text: 'Show events' }));
  if (!name) {
    const n = await api('/api/v1/traces/names?limit=100');
    return [h('h1', { text: 'Traces' }), card(null, form),
      card('Trace names (most recent first)', table(['Name', { label: 'Events', num: 1 }, { label: 'Messages', num: 1 }, 'Last seen'],
        (n.trace_names || []).map((t) => [link(t.trace_name, '#/traces/' + encodeURIComponent(t.trace_name)), fmt(t.trace_count), fmt(t.message_count), when(t.last_seen)]),
        'No trace recorded yet (POST /api/v1/traces).'))];
  }
  const t = await api('/api/v1/traces/by-name/' + encodeURIComponent(name) + '?limit=1000');
  const shown = (t.traces || []).length;
  return [h('h1', {}, 'Trace ', h('code', { text: name })), card(null, form),
    card('Events, oldest first' + (t.total > shown ? ' (the newest ' + fmt(shown) + ' of ' + fmt(t.total) + ')' : ''), eventTable(t.traces || [], true))];
}

// SEARCH_MESSAGES bounds the messages a search reads for a part of a
// transactionId or a trace id: the newest this many of the chosen window.
// An exact transactionId is looked up apart, in every queue and at any age
// (GET /api/v1/messages/by-transaction, an index probe per partition).
const SEARCH_MESSAGES = 1000;

// searchPage finds queues and consumer groups by name, a message by its
// exact transactionId anywhere, and messages whose transactionId holds the
// term or whose trace id is it, among the window's newest; each links to
// its page.
async function searchPage(term) {
  const w = range();
  const needle = term.toLowerCase();
  const has = (s) => String(s || '').toLowerCase().includes(needle);
  const [list, groups, exact, msgs, names] = await Promise.all([
    api('/api/v1/resources/queues?limit=1000'),
    api('/api/v1/consumer-groups'),
    api('/api/v1/messages/by-transaction?transactionId=' + encodeURIComponent(term)),
    api('/api/v1/messages?limit=' + SEARCH_MESSAGES + '&' + w.qs),
    api('/api/v1/traces/names?limit=1000'),
  ]);
  const ts = (names.trace_names || []).filter((t) => has(t.trace_name));
  document.getElementById('search').value = term;
  const qs = (list.queues || []).filter((q) => has(q.name));
  const gs = (groups || []).filter((g) => g.name !== '__QUEUE_MODE__' && has(g.name));
  const found = exact.messages || [];
  const seen = new Set(found.map((m) => m.partitionId + '/' + m.transactionId));
  const ms = (msgs.messages || []).filter((m) => !seen.has(m.partitionId + '/' + m.transactionId) &&
    (has(m.transactionId) || String(m.traceId || '').toLowerCase() === needle));
  const rows = (list) => list.map((m) => [messageLink(m), m.queue, m.partition, statusBadge(m.status), when(m.createdAt)]);
  return [
    h('h1', {}, 'Search ', h('code', { text: term })),
    card('Queues', table(['Queue', { label: 'Partitions', num: 1 }, { label: 'Pending', num: 1 }],
      qs.map((q) => [link(q.name, '#/queue/' + encodeURIComponent(q.name)), fmt(q.partitions), fmt(q.messages.pending)]), 'No queue by that name.')),
    card('Consumer groups', table(['Group', 'Queue', { label: 'Behind (messages)', num: 1 }],
      gs.map((g) => [link(g.name, '#/groups'), link(g.queueName, '#/queue/' + encodeURIComponent(g.queueName)), fmt(g.lagMessages)]), 'No consumer group by that name.')),
    h('section', { class: 'card', id: 'found-exact' }, h('h2', { text: 'Messages with exactly this transactionId (every queue, any age' +
      (found.length >= exact.limit ? '; the newest ' + fmt(exact.limit) : '') + ')' }),
    table(['Transaction', 'Queue', 'Partition', 'Status', 'Created'], rows(found), 'No message has exactly this transactionId.')),
    card('Messages whose transactionId holds it, or with this trace id (the newest ' + fmt(SEARCH_MESSAGES) + ' of the last ' + w.label + ')',
      table(['Transaction', 'Queue', 'Partition', 'Status', 'Created'], rows(ms), 'No other message in this window.')),
    card('Traces', table(['Trace name', { label: 'Events', num: 1 }, 'Last seen'],
      ts.map((t) => [link(t.trace_name, '#/traces/' + encodeURIComponent(t.trace_name)), fmt(t.trace_count), when(t.last_seen)]), 'No trace by that name.')),
  ];
}

// messageLink is a message's transactionId linking to its detail page.
function messageLink(m) {
  return h('a', { class: 'mono', href: '#/message/' + encodeURIComponent(m.partitionId) + '/' + encodeURIComponent(m.transactionId), text: m.transactionId });
}

function statusBadge(status) {
  return badge(String(status).replace('_', ' '), status === 'dead_letter' ? 'bad' : status === 'completed' ? 'ok' : '');
}

function setupSearch() {
  document.getElementById('search-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const term = document.getElementById('search').value.trim();
    if (term) location.hash = '#/search/' + encodeURIComponent(term);
  });
}

// mb is a byte count in megabytes, as a person reads a size.
function mb(bytes) {
  if (bytes === null || bytes === undefined) return '—';
  return fmt(+(bytes / 1048576).toFixed(bytes < 1048576 ? 3 : 1)) + ' MB';
}

function pct(v) { return v === null || v === undefined ? '—' : fmt(+Number(v).toFixed(2)) + ' %'; }

// gauge reads one {avg, min, max, last} leaf of a system-metrics point.
function gauge(point, group, name) { return (((point || {}).metrics || {})[group] || {})[name] || {}; }

// cpuPct is a point's CPU in percent of one core: Queen's cpu leaves are
// percent x 100 despite their names (1 % is 100).
function cpuPct(p) { return ((gauge(p, 'cpu', 'user_us').avg || 0) + (gauge(p, 'cpu', 'system_us').avg || 0)) / 100; }

// ms is a latency in milliseconds as a person reads it.
function ms(v) {
  if (v === null || v === undefined) return '—';
  return fmt(+v.toFixed(v < 10 ? 2 : 1)) + ' ms';
}

// systemPage is #/system: each broker's CPU, memory, pool, goroutines and
// request latency (p50, p99) over the chosen window, from the recorded
// minutes.
async function systemPage() {
  const w = range();
  const [sys, wm] = await Promise.all([api('/api/v1/analytics/system-metrics?' + w.qs), api('/api/v1/analytics/worker-metrics?' + w.qs)]);
  const reps = (sys.replicas || []).map((r) => ({ name: r.workerId || r.hostname, pts: (r.timeSeries || []).slice().sort((a, b) => Date.parse(a.timestamp) - Date.parse(b.timestamp)) }));
  const per = (f) => reps.map((r) => ({ name: r.name, points: r.pts.map((p) => [Date.parse(p.timestamp), f(p)]) }));
  // A latency point is a bucket in which the broker timed a request.
  const perLat = (k) => reps.map((r) => ({ name: r.name, points: r.pts.filter((p) => (p.latency || {}).requests > 0).map((p) => [Date.parse(p.timestamp), p.latency[k]]) }));
  const workers = (wm.workers || []).filter((x) => (x.latency || {}).requests > 0);
  return [
    h('h1', { text: 'System' }),
    card('Brokers (their newest recorded minute in the last ' + w.label + ')', table(['Broker', 'Host', { label: 'CPU', num: 1 }, { label: 'Memory (RSS)', num: 1 },
      { label: 'Pool in use', num: 1 }, { label: 'Pool idle', num: 1 }, { label: 'Pool size', num: 1 }, { label: 'Goroutines', num: 1 }, { label: 'Heap', num: 1 }, 'Minute'],
    reps.map((r) => {
      const p = r.pts[r.pts.length - 1];
      return [r.name, (sys.replicas.find((x) => (x.workerId || x.hostname) === r.name) || {}).hostname || '—', pct(cpuPct(p)),
        mb(gauge(p, 'memory', 'rss_bytes').last), fmt(gauge(p, 'database', 'pool_active').last), fmt(gauge(p, 'database', 'pool_idle').last),
        fmt(gauge(p, 'database', 'pool_size').last), fmt(gauge(p, 'runtime', 'goroutines').last), mb(gauge(p, 'runtime', 'heap_bytes').last), when(p.timestamp)];
    }), 'No broker recorded a minute in this window.')),
    h('section', { class: 'card', id: 'latency' }, h('h2', { text: 'Request latency per broker (the last ' + w.label + ')' }),
      table(['Broker', { label: 'Requests', num: 1 }, { label: 'p50', num: 1 }, { label: 'p99', num: 1 }, { label: 'Average', num: 1 },
        { label: 'Worst minute\'s p99', num: 1 }, { label: 'Slowest', num: 1 }],
      workers.map((x) => [x.workerId || x.hostname, fmt(x.latency.requests), ms(x.latency.p50Ms), ms(x.latency.p99Ms), ms(x.latency.avgMs),
        ms(x.latency.worstMinuteP99Ms), ms(x.latency.maxMs)]), 'No broker timed a request in this window.'),
      h('p', { class: 'muted', text: 'Each broker records each minute\'s p50 and p99; a window\'s p50 and p99 are those of the minute its middle request fell in (the minutes weighted by their requests), beside the worst minute\'s p99.' })),
    h('div', { class: 'grid' },
      chart('CPU', per(cpuPct), w.from, w.to, '% of one core'),
      chart('Memory (RSS)', per((p) => (gauge(p, 'memory', 'rss_bytes').avg || 0) / 1048576), w.from, w.to, 'MB'),
      chart('Pool in use', per((p) => gauge(p, 'database', 'pool_active').avg || 0), w.from, w.to, 'connections'),
      chart('Goroutines', per((p) => gauge(p, 'runtime', 'goroutines').avg || 0), w.from, w.to, ''),
      chart('Request latency p50', perLat('p50Ms'), w.from, w.to, 'ms'),
      chart('Request latency p99', perLat('p99Ms'), w.from, w.to, 'ms')),
  ];
}

// postgresPage is #/postgres: the database's cache hit ratios, its
// replication, sizes, dead tuples and the other sessions' queries (GET
// analytics/postgres-stats).
async function postgresPage() {
  const d = await api('/api/v1/analytics/postgres-stats');
  const db = d.databaseStats || {};
  const cs = d.cacheSummary || {};
  const aq = d.activeQueries || [];
  return [
    h('h1', {}, 'PostgreSQL ', h('code', { text: d.database || '' })),
    h('div', { class: 'tiles' }, tile('cache hit', pct((d.databaseCache || {}).cacheHitRatio)), tile('table cache hit', pct((cs.tables || {}).hitRatio)),
      tile('index cache hit', pct((cs.indexes || {}).hitRatio)), tile('database size', mb(db.sizeBytes)), tile('connections', db.connections),
      tile('other sessions\' queries', aq.length)),
    replicationCard(d.replication || {}),
    card('Table sizes', table(['Table', { label: 'Total', num: 1 }, { label: 'Table', num: 1 }, { label: 'Indexes', num: 1 }],
      (d.tableSizes || []).map((t) => [t.table, mb(t.totalSizeBytes), mb(t.tableSizeBytes), mb(t.indexSizeBytes)]), 'No table.')),
    card('Dead tuples', table(['Table', { label: 'Live', num: 1 }, { label: 'Dead', num: 1 }, { label: 'Dead share', num: 1 }, 'Last vacuum', 'Last autovacuum'],
      (d.deadTuples || []).map((t) => [t.table, fmt(t.liveTuples), fmt(t.deadTuples), pct(t.deadPercentage), when(t.lastVacuum), when(t.lastAutovacuum)]), 'No table.')),
    card('Index cache', table(['Index', 'Table', { label: 'Hit ratio', num: 1 }, { label: 'Disk reads', num: 1 }],
      (d.indexCache || []).map((t) => [t.index, t.table, pct(t.cacheHitRatio), fmt(t.diskReads)]), 'No index read yet.')),
    card('Other sessions\' queries', table(['PID', 'State', { label: 'Running', num: 1 }, 'Waiting on', 'Query'],
      aq.map((q) => [fmt(q.pid), q.state || '—', dur((q.durationMs || 0) / 1000), q.waitEvent ? q.waitEventType + ' / ' + q.waitEvent : '—', h('code', { text: q.query || '' })]), 'No other session is running a query.')),
  ];
}

// bytes is a WAL distance as a person reads it: 0 B, 12 kB, 3.4 MB.
function bytes(n) {
  if (n === null || n === undefined) return '—';
  if (n < 1024) return fmt(Math.round(n)) + ' B';
  if (n < 1048576) return fmt(+(n / 1024).toFixed(1)) + ' kB';
  return mb(n);
}

// lag is a replication lag in seconds as a person reads it (ms under a
// second); PostgreSQL reports none for a standby idle and caught up.
function lag(secs, behind) {
  if (secs === null || secs === undefined) return behind === 0 ? 'caught up' : '—';
  return secs < 1 ? fmt(+(secs * 1000).toFixed(1)) + ' ms' : dur(secs);
}

// replicationCard is the server's role, the standbys it streams to with
// their lag (pg_stat_replication) and, on a standby, its WAL receiver.
function replicationCard(r) {
  const sb = r.standbys || [];
  const wr = r.walReceiver;
  return h('section', { class: 'card', id: 'replication' }, h('h2', { text: 'Replication' }),
    h('p', {}, 'This server is the ', badge(r.role || '—', r.role === 'standby' ? 'warn' : 'ok'), r.role === 'standby' ? ' (read-only, in recovery).' : '.'),
    table(['Standby', 'Address', 'State', 'Sync', { label: 'Write lag', num: 1 }, { label: 'Flush lag', num: 1 }, { label: 'Replay lag', num: 1 },
      { label: 'Not yet sent', num: 1 }, { label: 'Not yet replayed', num: 1 }],
    sb.map((s) => [s.applicationName || '—', s.clientAddr || '—', s.state === 'streaming' ? badge('streaming', 'ok') : badge(s.state || '—', 'warn'),
      s.syncState || '—', lag(s.writeLagSeconds, s.bytesBehind), lag(s.flushLagSeconds, s.bytesBehind), lag(s.replayLagSeconds, s.bytesBehind),
      bytes(s.sentBytesBehind), bytes(s.bytesBehind)]),
    'No standby streams from this server: it has no replica to fail over to.'),
    wr ? table(['WAL receiver', 'From', 'Last message', { label: 'Received, not replayed', num: 1 }, { label: 'Since the last replayed transaction', num: 1 }],
      [[badge(wr.status, wr.status === 'streaming' ? 'ok' : 'warn'), (wr.senderHost || '—') + ':' + (wr.senderPort || '—'), when(wr.lastMessageAt),
        bytes(wr.replayBytesBehind), dur(wr.sinceLastReplaySeconds)]]) : null);
}

// pausedFor is a pause of writes in milliseconds as a person reads it.
function pausedFor(msecs) { return msecs < 1000 ? fmt(msecs) + ' ms' : dur(msecs / 1000); }

// failoverPage is #/failover: the answering broker's own record of its
// database (GET status/buffers' database: the server it is connected to,
// pauses of writes, server changes) and the standbys a failover could
// promote (postgres-stats' replication, absent while the database is).
async function failoverPage() {
  const [b, pg] = await Promise.all([api('/api/v1/status/buffers'), api('/api/v1/analytics/postgres-stats').catch(() => null)]);
  const d = b.database;
  if (!d) return [h('h1', { text: 'PostgreSQL failover' }), card(null, h('p', { class: 'muted', text: 'This broker keeps no record of its database.' }))];
  // Server addresses are an admin's (the answer leaves them out for others).
  const addr = (a) => a || ((Q.session || {}).canAdmin ? '—' : 'hidden (admins only)');
  const kinds = (k) => (k || []).join(', ');
  const r = (pg || {}).replication;
  return [
    h('h1', { text: 'PostgreSQL failover' }),
    h('div', { class: 'tiles' }, tile('writes', d.paused ? 'paused ' + pausedFor(d.paused.pausedMs) : d.writable ? 'flowing' : 'not yet connected'),
      tile('last pause', d.lastPause ? pausedFor(d.lastPause.pausedMs) : 'none'), tile('pauses seen', d.pauses.length), tile('server changes', d.serverChanges.length)),
    h('section', { class: 'card', id: 'failover-broker' }, h('h2', { text: 'This broker (' + d.serverId + ')' }),
      table(['', ''], [
        ['Connected to', h('code', { text: addr(d.server) })],
        ['Takes writes (primary)', d.writable ? badge('yes', 'ok') : d.readOnly ? badge('no: read-only', 'bad') : badge('no', 'bad')],
        ['On this server since', when(d.serverSince)],
        ['Recording since (its start)', when(d.recordingSince)],
      ]),
      h('p', { class: 'muted', text: 'Each broker keeps this record in memory from its start (a restart forgets it) and this page shows the broker that answered. "read-only": a server refused a write; "unavailable": the spool\'s drain found no database taking writes.' })),
    d.paused ? h('section', { class: 'card', id: 'failover-now' }, h('h2', { text: 'Writes are paused now' }),
      table(['Since', { label: 'For', num: 1 }, 'Seen', 'Server when it began'], [[when(d.paused.from), pausedFor(d.paused.pausedMs), kinds(d.paused.kinds), addr(d.paused.serverBefore)]])) : null,
    h('section', { class: 'card', id: 'failover-pauses' }, h('h2', { text: 'Pauses of writes (newest first)' }),
      table(['From', 'To', { label: 'Writes paused', num: 1 }, 'Seen', 'Server before', 'Server after', 'Failed over'],
        d.pauses.map((p) => [when(p.from), when(p.to), pausedFor(p.pausedMs), kinds(p.kinds), addr(p.serverBefore), addr(p.serverAfter),
          p.serverChanged ? badge('yes: another server', 'warn') : 'no: the same server']),
        'Writes have not paused since this broker started.')),
    card('Server changes (newest first)', table(['At', 'From', 'To', 'During a pause'],
      d.serverChanges.map((c) => [when(c.at), addr(c.from), addr(c.to), c.duringPause ? 'yes (a failover)' : 'no (a reconnect)']),
      'The pool has stayed on one server since this broker started.')),
    card('Standbys to fail over to', r ? table(['Standby', 'State', 'Sync', { label: 'Not yet replayed', num: 1 }],
      (r.standbys || []).map((x) => [x.applicationName || '—', x.state || '—', x.syncState || '—', bytes(x.bytesBehind)]),
      r.role === 'standby' ? 'The server answering is itself a standby.' : 'No standby streams from this server: a failover has nothing to promote.')
      : h('p', { class: 'muted', text: 'The database does not answer now: its standbys cannot be read.' })),
  ].filter((n) => n);
}

// ROLES name the leader roles as a person reads them.
const ROLES = {
  retention: 'Retention (expired and completed messages, eviction)',
  'queue-stats': 'Queue statistics (partition and backlog samples)',
  stats: 'Analytics rollup (folds and prunes the recorded minutes)',
};

function roleName(r) { return ROLES[r] || r; }

// took is a pass's duration in milliseconds as a person reads it.
function took(msecs) { return msecs === null || msecs === undefined ? 'running' : pausedFor(msecs); }

// leadersPage is #/leaders: who holds each leader lock now, and the passes
// the answering broker led (GET system/cluster's passes: each broker keeps
// its own in memory), by role and one by one, with its timer sweeping share.
async function leadersPage() {
  const c = await api('/api/v1/system/cluster');
  const ps = c.passes || [];
  const roles = [...new Set([...Object.keys(ROLES), ...ps.map((p) => p.role)])];
  const byRole = (r) => ps.filter((p) => p.role === r);
  const avg = (list) => { const d = list.filter((p) => p.durationMs !== null); return d.length ? d.reduce((n, p) => n + p.durationMs, 0) / d.length : null; };
  const sw = c.sweeper;
  const SHOWN = 50;
  return [
    h('h1', { text: 'Leaders' }),
    h('div', { class: 'tiles' }, tile('passes led here', ps.length), tile('roles led here', new Set(ps.map((p) => p.role)).size),
      tile('timers fired here', sw ? sw.fired : '—')),
    card('Lock holders now', table(['Role', 'Held by'],
      c.leaders.map((l) => [roleName(l.name), l.holder || h('span', { class: 'muted', text: 'nobody (between passes)' })]))),
    h('section', { class: 'card', id: 'leader-roles' }, h('h2', { text: 'Roles this broker (' + c.serverId + ') led since ' + when(c.passesSince) }),
      table(['Role', { label: 'Passes', num: 1 }, 'Last began', { label: 'Last took', num: 1 }, { label: 'Average', num: 1 }, 'Last failure'],
        roles.map((r) => {
          const list = byRole(r);
          const last = list[0];
          const failed = list.find((p) => p.error);
          return [roleName(r), fmt(list.length), last ? when(last.start) : 'not led here', last ? took(last.durationMs) : '—',
            avg(list) === null ? '—' : pausedFor(Math.round(avg(list))), failed ? failed.error + ' (' + when(failed.start) + ')' : 'none'];
        })),
      h('p', { class: 'muted', text: 'A leader holds a PostgreSQL advisory lock for one pass and lets it go, so brokers take turns. Each broker keeps the passes it led in memory from its start (a restart forgets them); this page shows the broker that answered.' })),
    h('section', { class: 'card', id: 'leader-passes' }, h('h2', { text: 'Passes this broker led (newest first' + (ps.length > SHOWN ? ', the newest ' + SHOWN + ' of ' + fmt(ps.length) : '') + ')' }),
      table(['Role', 'Began', { label: 'Took', num: 1 }, { label: 'Lock session', num: 1 }, 'Outcome'],
        ps.slice(0, SHOWN).map((p) => [roleName(p.role), when(p.start), took(p.durationMs), String(p.session), p.error ? badge(p.error, 'bad') : badge('done', 'ok')]),
        'This broker has led no pass since it started.')),
    card('Timer sweeping (every broker, no leader)', sw
      ? table(['', ''], [['Sweep cycles', fmt(sw.cycles)], ['Timers fired by this broker', fmt(sw.fired)], ['Expired KV rows it deleted', fmt(sw.pruned)]])
      : h('p', { class: 'muted', text: 'This broker runs no timer sweeper.' })),
  ];
}

async function maintenancePage() {
  if (!(Q.session || {}).canAdmin) {
    return [h('h1', { text: 'Maintenance' }), card(null, h('p', { class: 'muted', text: 'The maintenance switches need an admin token (Settings).' }))];
  }
  const m = await api('/api/v1/system/maintenance');
  const sw = (label, on, path) => [label, on ? badge('ON', 'warn') : badge('off', 'ok'),
    action(on ? 'Turn off' : 'Turn on', 'admin', () => api(path, { method: 'POST', body: { enabled: !on } }), { key: path, name: path.endsWith('/pop') ? 'pop-maintenance' : 'maintenance' })];
  return [
    h('h1', { text: 'Maintenance' }),
    card(null, table(['Switch', 'State', ''], [
      sw('Push maintenance (pushes go to the spool)', m.maintenanceMode, '/api/v1/system/maintenance'),
      sw('Pop maintenance (pops answer empty)', m.popMaintenanceMode, '/api/v1/system/maintenance/pop'),
    ])),
    card('Spool', table(['', ''], [['Buffered messages', fmt(m.bufferedMessages)], ['Buffer healthy', m.bufferHealthy ? badge('yes', 'ok') : badge('no', 'bad')]])),
  ];
}

async function spoolPage() {
  const b = await api('/api/v1/status/buffers');
  const q = b.quarantined || [];
  return [
    h('h1', { text: 'Spool' }),
    h('div', { class: 'tiles' }, tile('pending events', b.pending), tile('quarantined files', b.failed), tile('replayed files', b.replayedFiles || 0)),
    card('State', table(['', ''], [['Spool', b.enabled ? (b.dir || 'on') : 'off (FILE_BUFFER_DIR=off)'], ['Database', b.dbHealthy ? badge('healthy', 'ok') : badge('unreachable', 'bad')],
      ['Push maintenance', b.maintenanceMode ? badge('ON', 'warn') : badge('off', 'ok')]])),
    card('Quarantined files', q.length ? q.map((f) => h('div', { class: 'quarantined' }, h('h2', {}, h('code', { text: f.name })),
      table(['Queue', 'Partition', 'Transaction', 'SQLSTATE', 'Reason'], f.reasons.map((r) => [r.queue || '—', r.partition || '—', h('code', { text: r.transactionId || '—' }), r.sqlstate || '—', r.reason]), 'No reasons recorded.')))
      : h('p', { class: 'muted', text: b.failed && !b.quarantined ? 'The quarantined files and their reasons are shown to an admin token only.' : 'No file is quarantined.' })),
  ];
}

async function clusterPage() {
  const c = await api('/api/v1/system/cluster');
  const mesh = c.mesh;
  return [
    h('h1', { text: 'Cluster' }),
    card('Brokers (recorded a minute in the last 10 minutes)', table(['Broker', 'Host', { label: 'Port', num: 1 }, 'Last minute', { label: 'Requests', num: 1 }],
      c.brokers.map((b) => [h('span', {}, b.workerId, b.self ? ' ' : '', b.self ? badge('this one') : null), b.hostname, fmt(b.port), when(b.lastMinute), fmt(b.requests)]),
      'No broker has recorded a minute yet.')),
    card('Leaders', table(['Job', { label: 'Advisory lock', num: 1 }, 'Held by'],
      c.leaders.map((l) => [l.name, fmt(l.lock), l.holder || h('span', { class: 'muted', text: 'between passes' })]))),
    card('Mesh links', mesh ? table(['Peer', { label: 'Port', num: 1 }, 'Connected'],
      (mesh.peers || []).map((p) => [p.host, fmt(p.port), p.connected ? badge('up', 'ok') : badge('down', 'bad')]), mesh.enabled ? 'No peers.' : 'The mesh is off on this broker.')
      : h('p', { class: 'muted', text: 'The mesh links need an admin token.' })),
    card('Timers', table(['Queue', { label: 'Pending', num: 1 }, 'Next due'], c.timers.map((t) => [t.queue, fmt(t.timers), when(t.nextAt)]), 'No pending timers.')),
    card('KV namespaces', table(['Namespace', { label: 'Keys', num: 1 }], c.kvNamespaces.map((k) => [k.namespace, fmt(k.keys) + (k.capped ? '+' : '')]), 'No KV namespaces.')),
  ];
}

async function settingsPage() {
  const token = h('input', { type: 'password', id: 'token', value: Q.token, placeholder: 'a JWT, when the broker has JWT_ENABLED' });
  const tenant = h('input', { type: 'text', id: 'tenant', value: Q.tenant, placeholder: 'x-queen-tenant (empty: the token\'s or the default)' });
  const s = Q.session || {};
  return [
    h('h1', { text: 'Settings' }),
    card('Access', h('p', {}, 'Signed in as ', h('code', { text: s.sub || (s.authEnabled ? 'nobody' : 'anyone (auth is off)') }), ', level ', badge(s.level || '—')),
      h('label', { for: 'token', text: 'Token' }), token, h('label', { for: 'tenant', text: 'Tenant' }), tenant,
      h('p', {}, h('button', {
        id: 'save', text: 'Save', onclick: async () => {
          Q.token = token.value.trim(); Q.tenant = tenant.value.trim();
          localStorage.setItem('queen.token', Q.token); localStorage.setItem('queen.tenant', Q.tenant);
          await loadSession();
          render();
        },
      }))),
  ];
}

// ---------- routing and refresh ----------

function parseRoute() {
  const parts = (location.hash.replace(/^#\/?/, '') || '').split('/');
  const page = parts[0] || 'overview';
  return { page, arg: parts.slice(1).map(decodeURIComponent).join('/') };
}

const PAGES = {
  overview: () => overview(), queue: (a) => queuePage(a), dlq: () => dlqPage(), groups: () => groupsPage(),
  search: (a) => searchPage(a), message: (a) => messagePage(a), traces: (a) => tracesPage(a), system: () => systemPage(), postgres: () => postgresPage(), failover: () => failoverPage(), leaders: () => leadersPage(), maintenance: () => maintenancePage(), spool: () => spoolPage(), cluster: () => clusterPage(), settings: () => settingsPage(),
};

let rendering = false;

async function render() {
  if (rendering) return;
  rendering = true;
  const r = parseRoute();
  const fn = PAGES[r.page] || PAGES.overview;
  document.querySelectorAll('#nav a').forEach((a) => a.classList.toggle('active', a.dataset.page === (r.page === 'queue' ? 'overview' : r.page)));
  const main = document.getElementById('main');
  try {
    const nodes = await fn(r.arg);
    const fl = Q.state.flash && Date.now() - Q.state.flash.at < 8000 ? Q.state.flash : null;
    // A page leaves out a part with null; replaceChildren would print it.
    main.replaceChildren(...(fl ? [h('p', { class: fl.bad ? 'error flash' : 'muted flash', text: fl.text })] : []), ...nodes.filter((n) => n !== null && n !== undefined));
    document.getElementById('updated').textContent = 'Updated ' + new Date().toISOString().slice(11, 19) + ' UTC' +
      (FORM_PAGES.has(r.page) ? ' (not refreshed while this form is open)' : ', every ' + REFRESH_MS / 1000 + ' s');
    document.body.dataset.page = r.page;
    delete document.body.dataset.failed; // a failure is over once the page renders
    document.body.dataset.renders = String(Number(document.body.dataset.renders || 0) + 1);
  } catch (e) {
    main.replaceChildren(h('h1', { text: 'Cannot load this page' }),
      card(null, h('p', { class: 'error', text: e.message }),
        e.status === 401 || e.status === 403 ? h('p', {}, 'Give a token with access in ', link('Settings', '#/settings'), '.') : null));
    document.body.dataset.page = r.page;
    document.body.dataset.failed = String(e.status || 'network');
  } finally {
    rendering = false;
  }
}

async function loadSession() {
  try {
    Q.session = await api('/api/v1/session');
  } catch (e) {
    Q.session = { level: 'none', canWrite: false, canAdmin: false, authEnabled: true, error: e.message };
  }
  document.getElementById('who').textContent = (Q.session.sub || (Q.session.authEnabled ? 'no token' : 'auth off')) +
    ' · ' + Q.session.level + (Q.session.serverId ? ' · ' + Q.session.serverId : '');
  document.body.dataset.level = Q.session.level;
}

// typing is true while a field of the page has the focus: a re-render
// would replace it under the user's fingers (a filter, a seek time).
function typing() {
  const a = document.activeElement;
  return !!a && a.closest('main') !== null && (a.tagName === 'INPUT' || a.tagName === 'SELECT');
}

// tick is the refresh: the live pages re-render, a form page does not.
// body.dataset.ticks counts the ticks, so a test can wait for them.
function tick() {
  document.body.dataset.ticks = String(Number(document.body.dataset.ticks || 0) + 1);
  if (document.hidden || FORM_PAGES.has(parseRoute().page) || typing()) return;
  render();
}

window.addEventListener('hashchange', () => { Q.state.armed = null; render(); });

(async function start() {
  setupRange();
  setupSearch();
  await loadSession();
  await render();
  Q.timer = setInterval(tick, REFRESH_MS);
})();
