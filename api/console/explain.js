// explain.js: the console's "why did (or didn't) it run?" for a task's
// tick (GET /v1/tasks/{name}/explain?at=) or an instance
// (GET /v1/instances/{id}/explain). The page's helpers come from app.js.

import { get } from './api.js';

/**
 * explainView shows the explanation of the tick at (query "at") of task
 * name, or, when name is empty, of the instance id. ui holds app.js's
 * helpers: h, showPage, card, table, taskLink.
 */
export async function explainView(ui, name, id, query) {
  const { h, showPage, card, table, taskLink } = ui;
  const at = new URLSearchParams(query).get('at') || '';
  const x = name
    ? await get('/v1/tasks/' + encodeURIComponent(name) + '/explain', { at })
    : await get('/v1/instances/' + encodeURIComponent(id) + '/explain');
  const rows = x.steps.map((s) => [s.at ? s.at.replace('T', ' ').replace('Z', ' UTC') : '—', s.kind, s.actor || '—', s.text]);
  showPage(
    h('h1', {}, 'Explain ', x.subject),
    h('p', {}, 'Task ', taskLink(x.task),
      x.instance_id ? [', instance ', h('a', { href: '#/instances/' + x.instance_id }, '#' + x.instance_id)] : null),
    h('p', { id: 'explain-verdict', class: 'summary-line' }, x.verdict),
    card('Decision timeline', table(['at', 'what', 'who', 'in words'], rows)),
  );
}
