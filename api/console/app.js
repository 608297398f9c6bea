// app.js: the AX web console, a single-page application with hash routes.
// Every view reads the API with the token the user logged in with; the
// page itself holds no data.

import { APIError, call, follow, get, onUnauthorized, parseMetrics, text, token } from './api.js';
import { ledgerView } from './ledger.js';
import { limitsView } from './limits.js';
import { explainView } from './explain.js';
import { rangeRoutes } from './ranges.js';

// The helpers the pages in other files (ranges.js) build with.
export { act, badge, card, errorBox, fill, fmtTime, h, instLink, showPage, table, taskLink };

const main = document.getElementById('main');
const terminal = new Set(['SUCCEEDED', 'FAILED', 'SKIPPED', 'CANCELLED', 'SHADOW']);

// ---- DOM helpers ----

/** h builds an element: h('a', {href: '#/'}, 'text', child, ...). */
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

/**
 * fill puts children into el in place of what it held. Like h, it flattens
 * arrays and leaves out the null, undefined and false that a view passes
 * for what it does not show, where replaceChildren would print them as text.
 */
function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
}

/** showPage shows children as the page. */
function showPage(...children) { fill(main, ...children); }

function table(headers, rows, empty = 'Nothing to show.') {
  if (rows.length === 0) return h('p', { class: 'muted' }, empty);
  return h('table', {},
    h('thead', {}, h('tr', {}, headers.map((x) => h('th', {}, x)))),
    h('tbody', {}, rows.map((r) => h('tr', {}, r.map((c) => h('td', {}, c))))));
}

function badge(state) {
  return h('span', { class: 'badge state-' + String(state).toLowerCase() }, state);
}

function card(title, ...body) {
  return h('section', { class: 'card' }, h('h2', {}, title), ...body);
}

function stat(label, value, note) {
  return h('div', { class: 'stat' }, h('div', { class: 'stat-value' }, value), h('div', { class: 'stat-label' }, label),
    note ? h('div', { class: 'stat-note' }, note) : null);
}

function fmtTime(t) {
  if (!t) return '—';
  const d = new Date(t);
  return isNaN(d) || d.getFullYear() < 2 ? '—' : d.toLocaleString();
}

function fmtDur(ms) {
  if (ms === null || ms === undefined || isNaN(ms)) return '—';
  if (ms < 1000) return Math.round(ms) + ' ms';
  if (ms < 60000) return (ms / 1000).toFixed(ms < 10000 ? 2 : 1) + ' s';
  if (ms < 3600000) return Math.floor(ms / 60000) + 'm ' + Math.round((ms % 60000) / 1000) + 's';
  return Math.floor(ms / 3600000) + 'h ' + Math.round((ms % 3600000) / 60000) + 'm';
}

function fmtAgo(t) {
  if (!t) return '—';
  const s = Math.round((Date.now() - new Date(t)) / 1000);
  if (isNaN(s)) return '—';
  if (s < 60) return s + 's ago';
  if (s < 3600) return Math.floor(s / 60) + 'm ago';
  if (s < 86400) return Math.floor(s / 3600) + 'h ago';
  return Math.floor(s / 86400) + 'd ago';
}

function fmtPct(x) { return x === null || isNaN(x) ? '—' : (100 * x).toFixed(1) + ' %'; }

function duration(inst) {
  if (!inst.started_at || !inst.finished_at) return null;
  return new Date(inst.finished_at) - new Date(inst.started_at);
}

/**
 * progressBar shows an instance's progress, as its handler last reported
 * it: a bar of done over total (a moving one when the total is unknown),
 * the figures and the message, and which attempt said it when.
 */
function progressBar(p, state) {
  if (!p) return '—';
  // A SUCCEEDED instance did all its work, whatever it last reported.
  if (state === 'SUCCEEDED' && p.total > 0 && p.done < p.total) p = { ...p, done: p.total };
  const known = p.total > 0;
  const figures = known ? `${p.done} / ${p.total} (${Math.floor(100 * p.done / p.total)} %)` : `${p.done} done`;
  return h('div', { id: 'progress', class: 'progress', 'data-done': p.done, 'data-total': p.total },
    h('progress', { max: known ? p.total : undefined, value: known ? p.done : undefined }),
    h('span', { class: 'progress-text' }, figures, p.message ? ' — ' + p.message : ''),
    h('div', { class: 'muted small' }, `attempt ${p.attempt}, reported ${fmtTime(p.at)}`));
}

/** waitText shows why an instance waits, since when, and what ends it. */
function waitText(w) {
  return h('div', { id: 'wait', class: 'wait', 'data-kind': w.kind },
    h('strong', {}, w.reason), ' since ', fmtTime(w.since),
    w.ends ? h('div', { class: 'muted small' }, 'ends when: ' + w.ends) : null);
}

/**
 * runTimes are the instance's own times: its first start (of any attempt),
 * when it finished, and its total time from first start to end; the last
 * attempt's run time only where there were several.
 */
function runTimes(i) {
  const runs = (i.attempts || []).filter((a) => a.started_at);
  const first = runs.length ? runs[0].started_at : i.started_at;
  const total = first && i.finished_at ? new Date(i.finished_at) - new Date(first) : null;
  const rows = [['first started', fmtTime(first)], ['finished', fmtTime(i.finished_at)], ['total time', fmtDur(total)]];
  if (runs.length > 1) rows.push(['last attempt', `started ${fmtTime(i.started_at)}, run time ${fmtDur(duration(i))}`]);
  return rows;
}

/** attemptsTable shows one row per attempt: start, end, worker, outcome, error, duration. */
function attemptsTable(list) {
  return table(['attempt', 'started', 'ended', 'worker', 'outcome', 'duration', 'error'], list.map((a) => [
    String(a.attempt), fmtTime(a.started_at), fmtTime(a.ended_at), a.worker || '—', badge(a.state),
    a.duration_ms === undefined ? '—' : fmtDur(a.duration_ms), a.error ? h('span', { class: 'err' }, a.error) : '—']),
  'No attempt has run yet.');
}

/**
 * impliedShort: the start of an attempt that ended before its started
 * report was sent is recorded with its result, which its transition says;
 * for a short attempt that is the normal case and the words read as an
 * error, so they show only when the attempt took long enough to matter.
 */
function impliedShort(tr, k) {
  const t = tr[k];
  if (!t.reason || !t.reason.startsWith('recorded with the final report')) return false;
  const next = tr[k + 1];
  return !next || new Date(next.at) - new Date(t.at) < 2000;
}

function taskLink(name) { return h('a', { href: '#/tasks/' + encodeURIComponent(name) }, name); }
function instLink(id) { return h('a', { href: '#/instances/' + id }, '#' + id); }

function errorBox(err) {
  return h('div', { class: 'error', role: 'alert' }, err instanceof APIError ? err.message : String(err && err.message || err));
}

/** flash shows a message above the view for a few seconds. */
function flash(msg, kind = 'ok') {
  const el = h('div', { class: 'flash flash-' + kind, role: 'status' }, msg);
  document.body.append(el);
  setTimeout(() => el.remove(), kind === 'ok' ? 3000 : 8000);
}

/** act runs an operator action and reports its failure. */
async function act(what, f) {
  try {
    const out = await f();
    flash(what + ': done');
    return out;
  } catch (err) {
    flash(what + ': ' + (err.message || err), 'error');
    return undefined;
  }
}

// ---- charts ----

/**
 * view is the state of the view on screen: its charts, timers and streams.
 * Each route makes a new one, so a view that finds, once its data came,
 * that view is no longer the one it started with draws nothing.
 */
let view = { charts: [], timers: [], abort: new AbortController() };

function chart(canvas, config) {
  config.options = Object.assign({ animation: false, responsive: true, maintainAspectRatio: false }, config.options);
  const c = new Chart(canvas, config);
  view.charts.push(c);
  return c;
}

function chartBox(id) {
  return h('div', { class: 'chart' }, h('canvas', { id }));
}

function every(ms, f) { view.timers.push(setInterval(f, ms)); }

function leaveView() {
  view.charts.forEach((c) => c.destroy());
  view.timers.forEach(clearInterval);
  view.abort.abort();
  view = { charts: [], timers: [], abort: new AbortController() };
}

// ---- lists ----

/**
 * pager links the pages of a list of the route base, newest first: Newest,
 * Newer (after the first id shown, where the API pages that way) and Older
 * (before the last id shown). params is the route's query; the links keep
 * its filters. ids are those shown, limit the page size asked for. noun,
 * when given, labels the page by its count ("6 alerts") rather than by its
 * first and last ids, which read as a count where ids have gaps.
 */
function pager(base, params, ids, limit, { after = true, noun = '' } = {}) {
  const at = (cursor) => {
    const q = new URLSearchParams(params);
    q.delete('before');
    q.delete('after');
    if (cursor) q.set(...cursor);
    return base + (q.toString() ? '?' + q : '');
  };
  const link = (id, label, href) => (href
    ? h('a', { id, class: 'button small', href }, label)
    : h('span', { id, class: 'button small disabled', 'aria-disabled': 'true' }, label));
  const newest = !params.get('before') && !params.get('after');
  // A page after a cursor that came back short holds the newest there are.
  const newer = after && ids.length > 0 && (params.get('before') || (params.get('after') && ids.length >= limit));
  const older = ids.length > 0 && (ids.length >= limit || params.get('after'));
  return h('span', { class: 'pager' },
    link('page-newest', 'Newest', newest ? null : at()),
    after ? link('page-newer', '← Newer', newer ? at(['after', ids[0]]) : null) : null,
    link('page-older', 'Older →', older ? at(['before', ids[ids.length - 1]]) : null),
    h('span', { class: 'muted small', id: 'page-range' }, !ids.length ? ''
      : noun ? `${ids.length} ${noun}, newest first` : `#${ids[0]} – #${ids[ids.length - 1]}`));
}

/**
 * autoRefresh returns a checkbox that, while checked, calls load every ms
 * milliseconds for as long as the view is on screen. The choice holds for
 * the tab's session; it starts checked.
 */
function autoRefresh(load, ms = 5000) {
  const key = 'ax.autorefresh';
  const box = h('input', { type: 'checkbox', id: 'auto-refresh', checked: sessionStorage.getItem(key) !== 'off' });
  const status = h('span', { class: 'muted small', id: 'refresh-state' });
  box.addEventListener('change', () => sessionStorage.setItem(key, box.checked ? 'on' : 'off'));
  let busy = false;
  every(ms, async () => {
    if (!box.checked || busy) return;
    busy = true;
    try {
      await load();
      status.textContent = 'updated ' + new Date().toLocaleTimeString();
    } catch (err) {
      status.textContent = 'refresh failed: ' + (err.message || err);
    } finally {
      busy = false;
    }
  });
  return h('span', { class: 'refresh' }, h('label', {}, box, ' auto-refresh'), ' ', status);
}

/** timeFields returns the since and until inputs of a list's filter. */
function timeFields(params, names = ['since', 'until']) {
  const hints = { since: 'since: 1h, 7d or an RFC 3339 time', until: 'until: 10m or an RFC 3339 time' };
  return names.map((n) => h('input', { name: n, id: 'filter-' + n, list: 'time-presets', placeholder: hints[n], value: params.get(n) || '' }));
}

/** timePresets are the durations back from now a time field offers. */
function timePresets() {
  return h('datalist', { id: 'time-presets' }, ['15m', '1h', '6h', '24h', '7d'].map((v) => h('option', { value: v })));
}

/** filterForm makes a filter that routes to base with its fields' values. */
function filterForm(base, fields) {
  const form = h('form', { class: 'filters' }, fields, h('button', { type: 'submit' }, 'Filter'), timePresets());
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const q = new URLSearchParams();
    for (const f of fields) if (f.value.trim()) q.set(f.name, f.value.trim());
    location.hash = base + (q.toString() ? '?' + q : '');
  });
  return form;
}

// ---- views ----

function loginView() {
  document.body.classList.add('anon');
  const input = h('input', { id: 'token', type: 'password', autocomplete: 'off', required: true, placeholder: 'axt_…' });
  const out = h('div');
  const form = h('form', { id: 'login', class: 'login' },
    h('h1', {}, 'AX console'),
    h('label', { for: 'token' }, 'API token'),
    input,
    h('p', { class: 'muted' }, 'A viewer token reads; an operator token also fires, pauses and cancels; an admin token also applies tasks. ',
      'Make one with ', h('code', {}, 'ax token create --role viewer'), '; ', h('code', {}, 'ax dev'), ' prints an admin token.'),
    h('button', { type: 'submit' }, 'Log in'),
    out);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    token.set(input.value.trim());
    try {
      await get('/v1/tasks');
      document.body.classList.remove('anon');
      const next = sessionStorage.getItem('ax.next');
      sessionStorage.removeItem('ax.next');
      location.hash = next && !next.startsWith('#/login') ? next : '#/';
    } catch (err) {
      token.clear();
      fill(out, errorBox(err));
    }
  });
  showPage(form);
  input.focus();
}

/** states lists the instance states in the order of the state machine. */
const states = ['CREATED', 'WAITING', 'DISPATCHED', 'RUNNING', 'RETRYING', 'SUCCEEDED', 'FAILED', 'SKIPPED', 'CANCELLED', 'SHADOW'];

/**
 * dashboardView shows the last hour from the API's summary, which
 * PostgreSQL counts over every instance of the hour, and the fleet's state
 * from the workers, streams, alerts and metrics.
 */
async function dashboardView() {
  const mine = view;
  // The hour in clock minutes: the buckets start on whole minutes, as
  // their labels read, from the minute an hour ago to now's (partial).
  const until = new Date();
  const since = new Date(Math.floor(until.getTime() / 60000) * 60000 - 3600000);
  const [sum, workers, streams, alerts, health, metrics] = await Promise.all([
    get('/v1/reports/summary', { since: since.toISOString(), until: until.toISOString(), step: '1m' }),
    get('/v1/workers'),
    get('/v1/streams'),
    get('/v1/alerts', { state: 'firing', limit: 100 }),
    get('/v1/reports/health').catch(() => null),
    text('/metrics').then(parseMetrics).catch(() => []),
  ]);
  const succeeded = sum.states.SUCCEEDED, ended = succeeded + sum.states.FAILED;
  const rt = sum.run_time;
  const slots = (workers.workers || []).reduce((a, w) => a + w.slots, 0);
  const busy = (workers.workers || []).reduce((a, w) => a + w.busy, 0);
  const ofHour = (state) => '#/instances?' + new URLSearchParams(state ? { state, since: '1h' } : { since: '1h' });
  const lagGroups = groupLag(streams.streams || []);

  if (mine !== view) return;
  showPage(
    h('h1', {}, 'Dashboard'),
    h('div', { class: 'stats' },
      stat('runs in the last hour', h('a', { id: 'stat-runs', href: ofHour() }, sum.total), (sum.total / ((until - since) / 60000)).toFixed(1) + ' per minute'),
      stat('success rate', h('span', { id: 'stat-success' }, fmtPct(sum.success_rate)), `${succeeded} of ${ended} runs of the hour that ended`),
      stat('run time p50 / p95', h('span', { id: 'stat-latency' }, fmtDur(rt.p50_ms) + ' / ' + fmtDur(rt.p95_ms)),
        `start to end of a run, p99 ${fmtDur(rt.p99_ms)}, over ${rt.count} runs of the hour`),
      stat('workers', (workers.workers || []).length, `${busy} of ${slots} slots busy`),
      stat('firing alerts', (alerts.alerts || []).length, h('a', { href: '#/alerts' }, 'see alerts'))),
    h('p', { class: 'states', id: 'states' }, states.map((st) => h('a', { href: ofHour(st), 'data-state': st },
      badge(st), ' ', h('span', { class: 'count' }, sum.states[st])))),
    h('div', { class: 'grid' },
      card('Throughput (runs per minute, last hour)', chartBox('throughput'), h('p', { id: 'throughput-clipped', class: 'muted small' })),
      card('Run time per minute, last hour', chartBox('latency'))),
    h('div', { class: 'grid' },
      health ? h('section', { class: 'card', id: 'health' }, h('h2', {}, 'Health report'), healthSummary(health)) : null,
      h('section', { class: 'card', id: 'lag-card' }, h('h2', {}, 'Consumer lag'), lagSummary(lagGroups))),
    card('Fleet measures', metricsTable(metrics)),
  );

  const series = sum.series || [];
  const labels = series.map((b, i) => (i === series.length - 1 ? 'now' : new Date(b.start).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' })));
  // One spike must not flatten the normal minutes: the scale stops at
  // twice the 95th percentile of the busy minutes, and a minute above it
  // is drawn to the top with a marker and its figure in the note below.
  const totals = series.map((b) => b.total);
  const cap = robustCap(totals);
  const clipped = totals.map((v) => (cap !== null && v > cap ? v : null));
  const over = clipped.filter((v) => v !== null);
  fill(document.getElementById('throughput-clipped'), over.length
    ? `${over.length} minute${over.length > 1 ? 's' : ''} above the scale (▲), the busiest with ${Math.max(...over)} runs; the scale stops at ${cap} so that the other minutes read.`
    : '');
  chart(document.getElementById('throughput'), {
    type: 'bar',
    data: { labels, datasets: [
      { label: 'runs', data: series.map((b) => b.total - b.failed), backgroundColor: '#3b82f6', stack: 's' },
      { label: 'failed', data: series.map((b) => b.failed), backgroundColor: '#ef4444', stack: 's' },
      { type: 'line', label: 'above the scale', data: clipped.map((v) => (v === null ? null : cap)), showLine: false,
        pointStyle: 'triangle', pointRadius: 6, borderColor: '#111827', backgroundColor: '#111827' }] },
    options: { scales: { x: { stacked: true, ticks: { maxTicksLimit: 12 } },
      y: { stacked: true, beginAtZero: true, max: cap === null ? undefined : cap, ticks: { precision: 0 } } },
    plugins: { tooltip: { callbacks: { footer: (items) => {
      const v = totals[items[0].dataIndex];
      return cap !== null && v > cap ? `${v} runs in all (above the scale)` : '';
    } } } } },
  });
  chart(document.getElementById('latency'), {
    type: 'line',
    data: { labels, datasets: [
      { label: 'p50 (ms)', data: series.map((b) => b.run_time.p50_ms), borderColor: '#8b5cf6', pointRadius: 1, spanGaps: true },
      { label: 'p95 (ms)', data: series.map((b) => b.run_time.p95_ms), borderColor: '#f59e0b', pointRadius: 1, spanGaps: true }] },
    options: { scales: { x: { ticks: { maxTicksLimit: 12 } }, y: { beginAtZero: true } } },
  });
  const top = lagGroups.slice(0, lagTop);
  chart(document.getElementById('lag'), {
    type: 'bar',
    data: { labels: top.map((g) => g.label), datasets: [
      { label: 'pending', data: top.map((g) => g.pending), backgroundColor: '#f59e0b' },
      { label: 'ack pending', data: top.map((g) => g.ack_pending), backgroundColor: '#10b981' }] },
    options: { indexAxis: 'y', maintainAspectRatio: false, scales: { x: { beginAtZero: true, ticks: { precision: 0 } },
      y: { ticks: { autoSkip: false, callback(v) { const l = this.getLabelForValue(v); return l.length > 28 ? l.slice(0, 27) + '…' : l; } } } } },
  });
  every(10000, () => { if (location.hash === '' || location.hash === '#/') route(); });
}

/** metricsTable shows the eight fleet measures from this process's /metrics. */
function metricsTable(samples) {
  const sum = (name, f = () => true) => samples.filter((s) => s.name === name && f(s.labels)).reduce((a, s) => a + s.value, 0);
  const has = (name) => samples.some((s) => s.name === name || s.name.startsWith(name + '_'));
  const ratio = (a, b) => (b > 0 ? a / b : null);
  const buckets = new Map();
  for (const s of samples) {
    if (s.name === 'ax_scheduling_delay_seconds_bucket') buckets.set(s.labels.le, (buckets.get(s.labels.le) || 0) + s.value);
  }
  let p99 = null;
  const les = [...buckets.keys()].sort((a, b) => Number(a) - Number(b));
  const total = buckets.get('+Inf') || 0;
  if (total > 0) p99 = Number(les.find((le) => buckets.get(le) >= 0.99 * total)) * 1000;
  const attempts = sum('ax_attempts_total');
  const succeeded = sum('ax_instances_ended_total', (l) => l.state === 'SUCCEEDED');
  const failed = sum('ax_instances_ended_total', (l) => l.state === 'FAILED');
  const util = samples.filter((s) => s.name === 'ax_executor_slot_utilization').map((s) => s.value);
  const rows = [
    ['scheduling delay p99', has('ax_scheduling_delay_seconds') ? (p99 === Infinity ? '> largest bucket' : fmtDur(p99)) : '—'],
    ['dispatch success rate', has('ax_instances_ended_total') ? fmtPct(ratio(succeeded, succeeded + failed)) : '—'],
    ['timeout rate', has('ax_attempts_total') ? fmtPct(ratio(sum('ax_attempt_timeouts_total'), attempts)) : '—'],
    ['backlog older than 5 minutes', has('ax_backlog_instances') ? sum('ax_backlog_instances') : '—'],
    ['heartbeats lost', has('ax_worker_heartbeats_lost_total') ? sum('ax_worker_heartbeats_lost_total') : '—'],
    ['retry rate', has('ax_attempts_total') ? fmtPct(ratio(sum('ax_retries_total'), attempts)) : '—'],
    ['lease expiries', has('ax_lease_expiries_total') ? sum('ax_lease_expiries_total') : '—'],
    ['executor slot utilisation', util.length ? fmtPct(Math.max(...util)) : '—'],
  ];
  return h('div', {}, table(['measure', 'value'], rows),
    h('p', { class: 'muted small' }, 'Since this process started, from its /metrics; "—" where this process does not export the series (run the dispatcher and auditor in it, as ax dev does).'));
}

/** lagTop is how many groups of consumers the dashboard's lag shows before the rest fold. */
const lagTop = 8;

/**
 * robustCap returns the top of a scale that lets the normal values read
 * when a few spike: twice the 95th percentile of the non-zero values, or
 * null when nothing exceeds it (the scale then fits everything).
 */
function robustCap(values) {
  const busy = values.filter((v) => v > 0).sort((a, b) => a - b);
  if (busy.length < 5) return null;
  const p95 = busy[Math.min(busy.length - 1, Math.ceil(0.95 * busy.length) - 1)];
  const cap = Math.max(1, Math.ceil(2 * p95));
  return busy[busy.length - 1] > cap ? cap : null;
}

/**
 * groupLag sums the consumers' lag by stream and executor pool (a
 * dispatch consumer's pool; the workers' own queues together), largest
 * first: with a hundred consumers the dashboard shows a few groups.
 */
function groupLag(streams) {
  const groups = new Map();
  for (const s of streams) {
    for (const c of s.consumers || []) {
      const pool = c.pool ? (c.pool.startsWith('worker:') ? 'worker queues' : 'pool ' + c.pool) : '';
      const key = s.name + (pool ? ' · ' + pool : '');
      const g = groups.get(key) || { label: key, stream: s.name, consumers: 0, pending: 0, ack_pending: 0, redelivered: 0, last: null };
      g.consumers++;
      g.pending += c.pending;
      g.ack_pending += c.ack_pending;
      g.redelivered += c.redelivered;
      if (c.last_active && (!g.last || c.last_active > g.last)) g.last = c.last_active;
      groups.set(key, g);
    }
  }
  return [...groups.values()].sort((a, b) => (b.pending + b.ack_pending) - (a.pending + a.ack_pending) || a.label.localeCompare(b.label));
}

/** lagSummary is the lag chart of the top groups and their table, the rest folded. */
function lagSummary(groups) {
  const total = groups.reduce((a, g) => a + g.consumers, 0);
  const row = (g) => [g.label, g.consumers, g.pending, g.ack_pending, g.redelivered, fmtAgo(g.last)];
  const head = ['stream · pool', 'consumers', 'pending', 'ack pending', 'redelivered', 'last active'];
  const top = groups.slice(0, lagTop), rest = groups.slice(lagTop);
  const box = chartBox('lag');
  box.style.height = Math.max(120, 28 * top.length + 40) + 'px';
  return h('div', { id: 'lag-summary' },
    h('p', { class: 'muted small' }, `${total} consumers in ${groups.length} groups, largest lag first; each consumer on the `,
      h('a', { href: '#/streams', id: 'lag-streams' }, 'Streams page'), '.'),
    box,
    table(head, top.map(row), 'No consumers.'),
    rest.length ? h('details', { id: 'lag-rest' }, h('summary', { class: 'small' }, `${rest.length} more groups`), table(head, rest.map(row))) : null);
}

function healthSummary(r) {
  return h('div', {},
    h('p', { class: 'muted small' }, 'Generated ' + fmtTime(r.generated_at)),
    h('h3', {}, 'Consecutive failures'),
    table(['task', 'failures', 'last instance', 'last error'], (r.consecutive_failures || []).map((f) =>
      [taskLink(f.task), f.failures, f.last_instance_id ? instLink(f.last_instance_id) : '—', f.last_error || '']), 'None.'),
    h('h3', {}, 'Missed schedules'),
    table(['task', 'schedule', 'timezone', 'last tick'], (r.missed_schedules || []).map((m) =>
      [taskLink(m.task), m.schedule, m.timezone, fmtTime(m.last_tick)]), 'None.'),
    h('h3', {}, 'Duration outliers'),
    table(['task', 'instance', 'details'], (r.duration_outliers || []).map((o) =>
      [taskLink(o.task), o.instance_id ? instLink(o.instance_id) : '—', JSON.stringify(o)]), 'None.'),
    h('h3', {}, 'Tasks without an owner'),
    (r.tasks_without_owner || []).length ? h('p', {}, (r.tasks_without_owner || []).map((t) => [taskLink(t), ' '])) : h('p', { class: 'muted' }, 'None.'));
}

/** lastRun shows a task's newest instance: its state, linked, and when it was fired. */
function lastRun(info) {
  const i = info.last_run;
  if (i === undefined) return '…';
  if (!i) return '—';
  return h('a', { href: '#/instances/' + i.id, class: 'last-run', 'data-state': i.state }, badge(i.state), ' ', h('span', { class: 'muted small' }, fmtAgo(i.fired_at)));
}

function nextFire(info) {
  const times = (info.next_fire_times || []).flatMap((t) => t.utc || []).sort();
  return times.length ? fmtTime(times[0]) : '—';
}

function taskActions(info, after) {
  const name = info.task.task_name;
  const post = (what, path) => h('button', { type: 'button', class: 'small', 'data-action': what,
    onclick: async () => { if (await act(what + ' ' + name, () => call('POST', `/v1/tasks/${encodeURIComponent(name)}/${path}`)) !== undefined) after(); } }, what);
  const del = h('button', { type: 'button', class: 'small danger', 'data-action': 'delete',
    onclick: async () => {
      if (!confirm(`Delete task ${name}? It takes no more firings; its history stays.`)) return;
      if (await act('delete ' + name, () => call('DELETE', `/v1/tasks/${encodeURIComponent(name)}`)) === undefined) return;
      if (location.hash.startsWith('#/tasks/')) location.hash = '#/tasks'; else after();
    } }, 'delete');
  return h('span', { class: 'actions' },
    info.enabled ? post('disable', 'disable') : post('enable', 'enable'),
    info.paused ? post('resume', 'resume') : post('pause', 'pause'), del);
}

function taskStatus(info) {
  return [info.enabled ? badge('enabled') : badge('disabled'), info.paused ? [' ', badge('paused')] : null];
}

async function tasksView() {
  const mine = view;
  const { tasks = [] } = await get('/v1/tasks');
  const search = h('input', { id: 'search', type: 'search', placeholder: 'Search by name, handler, owner…', value: sessionStorage.getItem('ax.search') || '' });
  const body = h('div');
  const render = () => {
    const q = search.value.trim().toLowerCase();
    sessionStorage.setItem('ax.search', search.value);
    const shown = tasks.filter((t) => !q || [t.task.task_name, t.task.execution.handler, t.task.owner, t.task.description]
      .some((x) => x && x.toLowerCase().includes(q)));
    fill(body, table(['task', 'status', 'handler', 'triggers', 'next fire', 'last run', 'version', 'actions'], shown.map((t) => [
      taskLink(t.task.task_name), taskStatus(t), h('code', {}, t.task.execution.handler),
      (t.task.triggers || []).map((tr) => tr.schedule ? tr.type + ' ' + tr.schedule : tr.type).join(', ') || '—',
      nextFire(t), lastRun(t), t.version, [taskActions(t, route), ' ', h('a', { class: 'button small', href: '#/tasks/' + encodeURIComponent(t.task.task_name) + '?fire' }, 'fire')],
    ]), tasks.length ? 'No task matches.' : 'No tasks yet: apply one below.'));
  };
  search.addEventListener('input', render);
  render();
  // The list has no next fire times; each cron task's own answer has them.
  const fillNextFires = () => {
    const crons = tasks.filter((t) => (t.task.triggers || []).some((tr) => tr.type === 'cron')).slice(0, 100);
    Promise.all(crons.map((t) => get('/v1/tasks/' + encodeURIComponent(t.task.task_name))
      .then((info) => { t.next_fire_times = info.next_fire_times; }).catch(() => {})))
      .then(() => { if (crons.length && body.isConnected) render(); });
  };
  fillNextFires();
  // Nor the last run: each task's newest instance, for the first hundred.
  Promise.all(tasks.slice(0, 100).map((t) => get('/v1/instances', { task: t.task.task_name, limit: 1 })
    .then((r) => { t.last_run = (r.instances || [])[0] || null; }).catch(() => {})))
    .then(() => { if (body.isConnected) render(); });

  const def = h('textarea', { id: 'definition', rows: 12, spellcheck: 'false',
    placeholder: 'task_name: nightly-report\nexecution:\n  handler: builtin.echo\ntriggers:\n  - type: cron\n    schedule: "0 2 * * *"' });
  const out = h('div');
  const form = h('form', { id: 'apply', class: 'stack' },
    h('label', { for: 'definition' }, 'Task definition, YAML or JSON (needs an admin token)'), def,
    h('div', {}, h('button', { type: 'submit' }, 'Apply')), out);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const src = def.value.trim();
    const type = src.startsWith('{') ? 'application/json' : 'application/yaml';
    try {
      const res = await call('POST', '/v1/tasks', src, type);
      const name = res.task.task_name;
      fill(out, h('p', { class: 'ok' }, res.changed ? 'Applied ' : 'Unchanged: ', taskLink(name), ` (version ${res.version})`),
        (res.warnings || []).map((w) => h('p', { class: 'warn' }, 'Warning: ' + (w.message || w))));
      def.value = '';
      const again = await get('/v1/tasks');
      tasks.splice(0, tasks.length, ...(again.tasks || []));
      render();
      fillNextFires();
    } catch (err) {
      fill(out, errorBox(err));
    }
  });

  if (mine !== view) return;
  showPage(h('h1', {}, 'Tasks'), card('Tasks', search, body), card('Apply a task', form));
}

async function taskView(name, query) {
  const mine = view;
  const path = '/v1/tasks/' + encodeURIComponent(name);
  const [info, insts] = await Promise.all([get(path), get('/v1/instances', { task: name, limit: 100 })]);
  const list = insts.instances || [];
  const payload = h('textarea', { id: 'payload', rows: 4, spellcheck: 'false', placeholder: '{"key": "value"}' });
  const out = h('div');
  const schema = info.task.payload_schema;
  const fire = h('form', { id: 'fire', class: 'stack' },
    h('label', { for: 'payload' }, 'Payload (JSON, optional)'), payload,
    schema ? h('details', { id: 'payload-schema', open: true }, h('summary', { class: 'small' }, `Payload schema (version ${info.task.schema_version || 1})`),
      h('pre', { class: 'code small' }, JSON.stringify(schema, null, 2))) : h('p', { class: 'muted small' }, 'The task declares no payload schema: any JSON is taken.'),
    h('div', {}, h('button', { type: 'submit' }, 'Fire now')), out);
  fire.addEventListener('submit', async (e) => {
    e.preventDefault();
    // An operator fires from the console: a manual firing, as ax fire makes.
    const req = { operator: 'console' };
    if (payload.value.trim()) {
      try { req.payload = JSON.parse(payload.value); } catch (err) { fill(out, errorBox('the payload is not JSON: ' + err.message)); return; }
    }
    try {
      const res = await call('POST', path + '/runs', req);
      if (res.instance_id) location.hash = '#/instances/' + res.instance_id;
      else fill(out, h('p', { class: 'ok' }, `Fired: event ${res.event_id}` + (res.run_at ? ', runs at ' + fmtTime(res.run_at) + ' (see Scheduled firings)' : ', the instance is not made yet')));
    } catch (err) {
      fill(out, errorBox(err));
    }
  });
  const t = info.task;
  const nexts = (info.next_fire_times || []).map((nt) => h('div', {},
    h('h3', {}, `trigger ${nt.trigger}: `, h('code', {}, nt.schedule), ' ', nt.timezone),
    h('ol', {}, (nt.utc || []).map((u) => h('li', {}, fmtTime(u), h('span', { class: 'muted' }, ' (' + u + ')'))))));
  if (mine !== view) return;
  showPage(
    h('h1', {}, 'Task ', h('span', { id: 'task-name' }, t.task_name), ' ', taskStatus(info), ' ', taskActions(info, route)),
    t.description ? h('p', {}, t.description) : null,
    h('div', { class: 'grid' },
      card('Fire now', fire),
      card('Next fire times', nexts.length ? nexts : h('p', { class: 'muted' }, 'No cron trigger.'),
        nexts.length ? h('p', { class: 'small' }, h('a', { id: 'ledger', href: '#/tasks/' + encodeURIComponent(t.task_name) + '/ledger' }, 'Ledger: every tick and what became of it')) : null)),
    card('Scheduled firings', firingsTable(name)),
    card('Duration of recent runs', chartBox('durations')),
    card('Recent instances', h('p', { class: 'small' }, h('a', { id: 'all-instances', href: '#/instances?task=' + encodeURIComponent(t.task_name) },
      'All instances of this task, paged and filtered by time')), table(['instance', 'state', 'source', 'attempt', 'worker', 'created', 'run time'], list.map((i) => [
      instLink(i.id), badge(i.state), i.source, `${i.attempt}/${i.max_attempts}`, i.worker_id || '—', fmtTime(i.created_at), fmtDur(duration(i))]))),
    card('Definition', h('p', { class: 'muted small' }, `version ${info.version}, updated ${fmtTime(info.updated_at)}`),
      h('pre', { class: 'code' }, JSON.stringify(t, null, 2))),
  );
  const timed = list.filter((i) => duration(i) !== null).reverse();
  chart(document.getElementById('durations'), {
    type: 'bar',
    data: { labels: timed.map((i) => '#' + i.id), datasets: [{ label: 'run time (ms)', data: timed.map(duration),
      backgroundColor: timed.map((i) => (i.state === 'SUCCEEDED' ? '#10b981' : '#ef4444')) }] },
    options: { plugins: { legend: { display: false } }, scales: { y: { beginAtZero: true } },
      onClick: (_, els) => { if (els.length) location.hash = '#/instances/' + timed[els[0].index].id; } },
  });
  if (query === 'fire') payload.focus();
}

async function instancesView(query) {
  const mine = view;
  const params = new URLSearchParams(query);
  const limit = Number(params.get('limit')) || 50;
  const task = h('input', { name: 'task', id: 'filter-task', placeholder: 'task', value: params.get('task') || '' });
  const state = h('select', { name: 'state', id: 'filter-state' }, ['', ...states]
    .map((s) => h('option', { value: s, selected: s === (params.get('state') || '') }, s || 'any state')));
  const size = h('select', { name: 'limit', id: 'filter-limit' }, [50, 100, 200, 500]
    .map((n) => h('option', { value: n === 50 ? '' : n, selected: n === limit }, n + ' a page')));
  const filter = filterForm('#/instances', [task, state, ...timeFields(params), size]);
  const body = h('div');
  const nav = h('div');
  const load = async () => {
    const { instances = [] } = await get('/v1/instances', { task: params.get('task'), state: params.get('state'),
      since: params.get('since'), until: params.get('until'), before: params.get('before'), after: params.get('after'), limit });
    if (mine !== view) return;
    fill(body, table(['instance', 'task', 'state', 'source', 'attempt', 'worker', 'fired', 'run time', 'waits', 'error'], instances.map((i) => [
      instLink(i.id), taskLink(i.task), badge(i.state), i.source, `${i.attempt}/${i.max_attempts}`, i.worker_id || '—', fmtTime(i.fired_at), fmtDur(duration(i)),
      i.wait ? h('span', { class: 'wait-kind', title: i.wait.reason }, i.wait.kind.replaceAll('_', ' ')) : '—',
      i.error ? h('span', { class: 'err small clip', title: i.error }, i.error) : '—']),
    'No instances match.'));
    fill(nav, pager('#/instances', params, instances.map((i) => i.id), limit));
  };
  await load();
  if (mine !== view) return;
  showPage(h('h1', {}, 'Instances'), card('Instances', filter, h('div', { class: 'list-bar' }, nav, autoRefresh(load)), body));
}

async function instanceView(id, toLogs) {
  const mine = view;
  const inst = await get('/v1/instances/' + id);
  const state = h('span', { id: 'state' });
  const facts = h('div');
  const timeline = h('div');
  const attempts = h('div', { id: 'attempts' });
  const logs = h('pre', { id: 'logs', class: 'logs' });
  const logState = h('span', { id: 'log-state', class: 'muted' }, terminal.has(inst.state) ? 'reading…' : 'following…');
  const buttons = h('span', { class: 'actions' },
    h('button', { type: 'button', id: 'rerun', onclick: async () => {
      const res = await act('rerun #' + id, () => call('POST', `/v1/instances/${id}/rerun`, {}));
      if (res && res.instance_id) location.hash = '#/instances/' + res.instance_id;
      else if (res) flash(`rerun #${id}: event ${res.event_id}, the instance is not made yet`);
    } }, 'Rerun'),
    h('button', { type: 'button', id: 'cancel', class: 'danger', onclick: async () => {
      if (confirm(`Cancel instance ${id}?`)) { await act('cancel #' + id, () => call('POST', `/v1/instances/${id}/cancel`, {})); refresh(); }
    } }, 'Cancel'));

  const render = (i) => {
    fill(state, badge(i.state));
    buttons.querySelector('#cancel').disabled = terminal.has(i.state);
    fill(facts, table(['field', 'value'], [
      ['task', [taskLink(i.task), ` (version ${i.task_version})`]],
      ['source', i.source], ['event', h('code', {}, i.event_id)],
      ...(i.wait ? [['waits', waitText(i.wait)]] : []),
      ['attempt', `${i.attempt} of ${i.max_attempts}`], ['priority', i.priority], ['pool', i.pool || '—'], ['worker', i.worker_id || '—'],
      ['fired', fmtTime(i.fired_at)], ['created', fmtTime(i.created_at)],
      ...runTimes(i),
      ['progress', progressBar(i.progress, i.state)],
      ['payload', i.payload ? h('pre', { class: 'code' }, JSON.stringify(i.payload, null, 2)) : '—'],
      ['output', i.output ? h('pre', { class: 'code' }, JSON.stringify(i.output, null, 2)) : '—'],
      ['error', i.error ? h('span', { class: 'err' }, i.error) : '—'],
    ]));
    fill(attempts, attemptsTable(i.attempts || []));
    const tr = i.transitions || [];
    fill(timeline, tr.length ? h('ol', { class: 'timeline' }, tr.map((t, k) => h('li', {},
      h('div', { class: 'when' }, fmtTime(t.at), k > 0 ? h('span', { class: 'muted' }, ' +' + fmtDur(new Date(t.at) - new Date(tr[k - 1].at))) : null),
      h('div', {}, t.from ? [badge(t.from), ' → '] : null, badge(t.to), t.attempt ? ` attempt ${t.attempt}` : '',
        ' by ', h('code', {}, t.operator || 'system'), t.reason && !impliedShort(tr, k) ? h('div', { class: 'muted' }, t.reason) : null)))) : h('p', { class: 'muted' }, 'No transitions yet.'));
  };
  const refresh = async () => {
    try { render(await get('/v1/instances/' + id)); } catch (err) { flash(err.message, 'error'); }
  };
  render(inst);

  if (mine !== view) return;
  showPage(
    h('h1', {}, 'Instance #' + id + ' ', state, ' ', buttons, ' ', h('a', { id: 'explain', class: 'button small', href: '#/instances/' + id + '/explain' }, 'why?')),
    h('div', { class: 'grid' }, card('Instance', facts), card('State timeline', timeline)),
    card('Attempts', attempts),
    h('section', { class: 'card', id: 'logs-card' }, h('h2', {}, 'Log ', logState), logs),
  );
  every(1000, () => { if (!terminal.has(state.textContent)) refresh(); });

  const signal = view.abort.signal;
  const addLine = (l) => {
    const fields = l.fields && Object.keys(l.fields).length ? ' ' + JSON.stringify(l.fields) : '';
    logs.append(h('div', { class: 'line level-' + l.level },
      h('span', { class: 'muted' }, new Date(l.time).toLocaleTimeString() + ` a${l.attempt} `),
      h('span', { class: 'lvl' }, l.level.toUpperCase().padEnd(5) + ' '), l.message, h('span', { class: 'fields' }, fields)));
    if (logs.scrollHeight - logs.scrollTop - logs.clientHeight < 80) logs.scrollTop = logs.scrollHeight;
  };
  follow(`/v1/instances/${id}/logs?follow=true`, (ev) => {
    if (ev.event === 'end') {
      logState.textContent = 'ended: ' + JSON.parse(ev.data).state;
      refresh();
      return;
    }
    addLine(JSON.parse(ev.data));
  }, signal).then(() => {
    if (!logs.childElementCount) logs.append(h('div', { class: 'muted' }, 'No log lines.'));
    if (logState.textContent.endsWith('…')) logState.textContent = 'stream closed';
  }).catch((err) => {
    if (!signal.aborted) logState.textContent = 'error: ' + err.message;
  });
  if (toLogs) document.getElementById('logs-card').scrollIntoView();
}

async function workersView() {
  const mine = view;
  const body = h('div');
  const load = async () => {
    const { workers = [] } = await get('/v1/workers');
    if (mine !== view) return;
    fill(body, table(
      ['worker', 'host', 'version', 'pools', 'handlers', 'slots busy', 'started', 'last heartbeat'],
      workers.map((w) => [h('code', {}, w.id), w.hostname || '—', w.version, (w.pools || []).join(', '),
        h('span', { class: 'small' }, (w.handlers || []).join(', ')), `${w.busy} / ${w.slots}`, fmtTime(w.started_at), fmtAgo(w.heartbeat_at)]),
      'No live worker.'));
  };
  await load();
  if (mine !== view) return;
  showPage(h('h1', {}, 'Workers'), card('Live workers', h('div', { class: 'list-bar' }, h('span'), autoRefresh(load)), body));
}

async function streamsView() {
  const mine = view;
  const { streams = [], missing = [] } = await get('/v1/streams');
  if (mine !== view) return;
  showPage(h('h1', {}, 'Streams and consumers'),
    missing.length ? errorBox('Missing streams: ' + missing.join(', ')) : null,
    ...streams.map((s) => card(s.name + (s.bucket ? ` (bucket ${s.bucket})` : ''),
      h('p', { class: 'muted small' }, `${s.retention} retention · ${s.messages} messages · ${s.bytes} bytes · seq ${s.first_seq}–${s.last_seq} · subjects `,
        h('code', {}, (s.subjects || []).join(' '))),
      table(['consumer', 'durable', 'pending', 'ack pending', 'redelivered', 'waiting', 'last active'], (s.consumers || []).map((c) =>
        [h('code', {}, c.name), c.durable ? 'yes' : 'no', c.pending, c.ack_pending, c.redelivered, c.waiting, fmtTime(c.last_active)]), 'No consumers.'))));
}

async function alertsView(query) {
  const mine = view;
  const params = new URLSearchParams(query);
  const st = params.get('state') || '';
  const limit = 100;
  const tabs = h('p', { class: 'tabs' }, ['', 'firing', 'acked', 'resolved'].map((s) =>
    h('a', { href: '#/alerts' + (s ? '?state=' + s : ''), class: s === st ? 'active' : '' }, s || 'all')));
  const body = h('div');
  const nav = h('div');
  const load = async () => {
    const { alerts = [] } = await get('/v1/alerts', { state: st, before: params.get('before'), limit });
    if (mine !== view) return;
    fill(body, table(
      ['level', 'rule', 'state', 'task', 'instance', 'reason', 'count', 'first seen', 'last seen', ''],
      alerts.map((a) => [badge(a.level), a.rule, badge(a.state), a.task ? taskLink(a.task) : '—', a.instance_id ? instLink(a.instance_id) : '—',
        a.reason, a.count, fmtTime(a.first_seen), fmtTime(a.last_seen),
        a.state === 'firing' ? h('button', { type: 'button', class: 'small', onclick: async () => {
          if (await act('acknowledge alert ' + a.id, () => call('POST', `/v1/alerts/${a.id}/ack`, {})) !== undefined) load();
        } }, 'Acknowledge') : '']), 'No alerts.'));
    fill(nav, pager('#/alerts', params, alerts.map((a) => a.id), limit, { after: false, noun: alerts.length === 1 ? 'alert' : 'alerts' }));
  };
  await load();
  if (mine !== view) return;
  showPage(h('h1', {}, 'Alerts'), card('Alerts', tabs, h('div', { class: 'list-bar' }, nav, autoRefresh(load)), body));
}

async function auditView(query) {
  const mine = view;
  const params = new URLSearchParams(query);
  const limit = 100;
  const fields = ['task', 'instance', 'operator'].map((n) => h('input', { name: n, id: 'filter-' + n, placeholder: n, value: params.get(n) || '' }));
  const filter = filterForm('#/audit', [...fields, ...timeFields(params, ['since'])]);
  const body = h('div');
  const nav = h('div');
  const load = async () => {
    const { records = [] } = await get('/v1/audit', { task: params.get('task'), instance: params.get('instance'), operator: params.get('operator'),
      since: params.get('since'), before: params.get('before'), limit });
    if (mine !== view) return;
    fill(body, table(
      ['time', 'kind', 'task', 'instance', 'what', 'operator', 'reason'],
      records.map((r) => [fmtTime(r.at), r.kind, r.task ? taskLink(r.task) : '—', r.instance_id ? instLink(r.instance_id) : '—',
        r.action ? r.action : [r.from ? badge(r.from) : null, r.from ? ' → ' : null, r.to ? badge(r.to) : null],
        h('code', {}, r.operator), r.reason || '']), 'No audit records.'));
    fill(nav, pager('#/audit', params, records.map((r) => r.id), limit, { after: false }));
  };
  await load();
  if (mine !== view) return;
  showPage(h('h1', {}, 'Audit'), card('Audit records', filter, h('div', { class: 'list-bar' }, nav, autoRefresh(load)), body));
}

/**
 * firingsTable lists the delayed firings that wait for their time (of one
 * task, or all), each with its due time and buttons to cancel it or fire
 * it now; it reloads itself after an action and every few seconds.
 */
function firingsTable(task) {
  const body = h('div', { id: 'firings' }, h('p', { class: 'muted' }, 'Loading…'));
  const load = async () => {
    let res;
    try { res = await get('/v1/firings', { task }); } catch (err) { fill(body, errorBox(err)); return; }
    const firings = res.firings || [];
    const act1 = (f, what, path) => async () => {
      const out = await act(`${what} ${f.task} ${f.event_id}`, () => call('POST', `/v1/tasks/${encodeURIComponent(f.task)}/runs/${encodeURIComponent(f.event_id)}/${path}`, {}));
      if (out && out.instance_id) { location.hash = '#/instances/' + out.instance_id; return; }
      load();
    };
    fill(body, table(['task', 'event', 'due', 'in', 'fired', 'by', ''], firings.map((f) => [
      taskLink(f.task), h('code', {}, f.event_id), fmtTime(f.run_at), fmtDur(new Date(f.run_at) - Date.now()), fmtTime(f.fired_at), f.operator || '—',
      [h('button', { type: 'button', class: 'small', 'data-action': 'fire-now', 'data-event': f.event_id, onclick: act1(f, 'fire now', 'fire') }, 'Fire now'), ' ',
        h('button', { type: 'button', class: 'small danger', 'data-action': 'cancel-firing', 'data-event': f.event_id, onclick: act1(f, 'cancel', 'cancel') }, 'Cancel')],
    ]), 'No delayed firing waits.'), res.truncated ? h('p', { class: 'muted small' }, 'More wait than are shown.') : null);
  };
  load();
  every(5000, load);
  return body;
}

async function firingsView() {
  showPage(h('h1', {}, 'Scheduled firings'),
    card('Delayed firings that wait for their time', h('p', { class: 'muted small' },
      'Fired with a delay or run_at (ax fire --delay): no instance exists until the due time, so the Instances page does not show them yet.'),
    firingsTable('')));
}

// ---- routing ----

const routes = [
  [/^#\/?$/, () => dashboardView()],
  [/^#\/tasks$/, () => tasksView()],
  [/^#\/tasks\/([^/]+)$/, (m, q) => taskView(decodeURIComponent(m[1]), q)],
  [/^#\/tasks\/([^/]+)\/ledger$/, (m, q) => ledgerView({ h, showPage, card, table, badge, fmtDur, taskLink }, decodeURIComponent(m[1]), q)],
  [/^#\/tasks\/([^/]+)\/explain$/, (m, q) => explainView({ h, showPage, card, table, taskLink }, decodeURIComponent(m[1]), 0, q)],
  [/^#\/instances\/(\d+)\/explain$/, (m) => explainView({ h, showPage, card, table, taskLink }, '', m[1], '')],
  [/^#\/instances$/, (m, q) => instancesView(q)],
  [/^#\/instances\/(\d+)$/, (m) => instanceView(m[1], false)],
  [/^#\/instances\/(\d+)\/logs$/, (m) => instanceView(m[1], true)],
  [/^#\/firings$/, () => firingsView()],
  [/^#\/workers$/, () => workersView()],
  [/^#\/streams$/, () => streamsView()],
  [/^#\/alerts$/, (m, q) => alertsView(q)],
  [/^#\/audit$/, (m, q) => auditView(q)],
  [/^#\/limits$/, () => limitsView({ h, showPage, card, table })],
  ...rangeRoutes,
];

async function route() {
  leaveView();
  const hash = location.hash || '#/';
  const [path, query = ''] = hash.split('?');
  if (path === '#/login') { loginView(); return; }
  if (!token.get()) {
    sessionStorage.setItem('ax.next', hash);
    location.hash = '#/login';
    return;
  }
  document.body.classList.remove('anon');
  for (const a of document.querySelectorAll('#nav a')) {
    const href = a.getAttribute('href');
    a.classList.toggle('active', href === '#/' ? path === '#/' || path === '#' : path.startsWith(href));
  }
  for (const [re, show] of routes) {
    const m = re.exec(path);
    if (!m) continue;
    const mine = view;
    try {
      await show(m, query);
    } catch (err) {
      if (mine === view && !(err instanceof APIError && err.status === 401)) showPage(errorBox(err));
    }
    return;
  }
  showPage(h('h1', {}, 'Not found'), h('p', {}, 'No page at ', h('code', {}, hash), '. ', h('a', { href: '#/' }, 'Go to the dashboard.')));
}

onUnauthorized(() => {
  token.clear();
  sessionStorage.setItem('ax.next', location.hash);
  location.hash = '#/login';
});
document.getElementById('logout').addEventListener('click', () => { token.clear(); location.hash = '#/login'; });
window.addEventListener('hashchange', route);
route();
