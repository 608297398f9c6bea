// limits.js: the console's Limits page (GET /v1/limits): each named limit
// with its bounds, whether it is paused, what runs and waits under it and
// its busiest keys. The page's helpers come from app.js, which routes here.

import { get } from './api.js';

/**
 * limitsView shows every named limit. ui holds app.js's helpers: h,
 * showPage, card, table.
 */
export async function limitsView(ui) {
  const { h, showPage, card, table } = ui;
  const { limits = [] } = await get('/v1/limits');
  const bounds = (l) => [l.concurrency ? 'concurrency ' + l.concurrency : '', l.rate ? 'rate ' + l.rate : '',
    l.key ? 'per key ' + l.key : ''].filter(Boolean).join(', ');
  const keys = (l) => (l.keys || []).slice(0, 5).map((k) => `${k.key || '—'}: ${k.running} running, ${k.waiting} waiting`).join('; ') || '—';
  const rows = limits.map((l) => [h('code', {}, l.name), bounds(l), l.paused ? h('strong', { class: 'paused' }, 'paused') : 'admitting',
    String(l.running), String(l.waiting), String(l.admitted_last_second), keys(l)]);
  showPage(
    h('h1', {}, 'Limits'),
    h('p', { class: 'muted small' }, 'Named limits that tasks share (ax limit list). An attempt starts only when every limit its task names admits it; until then its instance is WAITING, the limit and key as its reason.'),
    card('Limits', table(['name', 'bounds', 'state', 'running', 'waiting', 'admitted/s', 'busiest keys'], rows,
      'No limit applied: ax limit apply -f FILE.')),
  );
}
