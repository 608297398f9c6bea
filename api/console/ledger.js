// ledger.js: the console's ledger of a task (GET /v1/tasks/{name}/ledger):
// every tick its cron triggers scheduled in a range, beside what became of
// it, each linked to its explanation (explain.js). The page's helpers come
// from app.js, which routes here.

import { get } from './api.js';

/**
 * ledgerView shows the ledger of task name for the query's from and to
 * (RFC 3339 or a duration back from now; default the last day). ui holds
 * app.js's helpers: h, showPage, card, table, badge, fmtDur, taskLink.
 */
export async function ledgerView(ui, name, query) {
  const { h, showPage, card, table, badge, fmtDur, taskLink } = ui;
  const params = new URLSearchParams(query);
  const from = params.get('from') || '24h';
  const to = params.get('to') || '';
  const l = await get('/v1/tasks/' + encodeURIComponent(name) + '/ledger', { from, to });
  const field = (id, label, value, hint) => h('label', {}, label, ' ',
    h('input', { id, name: id, value, placeholder: hint, size: 26 }));
  const form = h('form', { id: 'ledger-range', class: 'filters', onsubmit: (e) => {
    e.preventDefault();
    const q = new URLSearchParams();
    for (const k of ['from', 'to']) if (form.elements[k].value) q.set(k, form.elements[k].value);
    location.hash = '#/tasks/' + encodeURIComponent(name) + '/ledger?' + q;
  } }, field('from', 'from', from, '24h or 2025-03-30T00:00:00Z'), ' ', field('to', 'to', to, 'now'), ' ',
  h('button', { type: 'submit' }, 'show'));
  const note = (t) => [t.dst ? 'dst ' + t.dst + ': ' + t.dst_note : '', t.reason || '', t.moved ? '(in history)' : '']
    .filter(Boolean).join('; ') || '—';
  const rows = [...l.ticks, ...(l.doubled || [])].map((t) => [
    t.tick ? t.tick.replace('T', ' ').replace('Z', ' UTC') : '—', t.wall || '—',
    h('span', { class: 'tick-' + t.status }, t.status),
    t.instance_id ? h('a', { href: '#/instances/' + t.instance_id }, '#' + t.instance_id) : '—',
    t.state ? badge(t.state) : '—', t.attempts || '—',
    t.duration_ms === undefined ? '—' : fmtDur(t.duration_ms), note(t),
    t.tick ? h('a', { class: 'why', href: '#/tasks/' + encodeURIComponent(name) + '/explain?at=' + encodeURIComponent(t.tick) }, 'why?') : '—']);
  const triggers = l.triggers.map((tr) => h('li', {}, `trigger ${tr.index}: `, h('code', {}, tr.schedule),
    ` in ${tr.timezone}, misfire ${tr.misfire}`));
  showPage(
    h('h1', {}, 'Ledger of ', taskLink(name)),
    h('p', { id: 'ledger-summary', class: 'summary-line' }, l.summary_line),
    form,
    h('ul', { class: 'muted small' }, triggers),
    card(`Ticks from ${l.from} to ${l.to}`,
      table(['tick', 'wall clock', 'status', 'instance', 'state', 'attempts', 'run time', 'note', 'explain'], rows,
        'No cron tick in this range.')),
  );
}
