// ranges.js: the console's pages for work over ranges of time and
// instances: backfills (progress, pause, resume, cancel), dead-letter
// groups (with replay) and bulk actions on the instances a query matches
// (select with a dry run, then act).

import { call, get } from './api.js';
import { act, badge, card, errorBox, fill, fmtTime, h, instLink, showPage, table, taskLink } from './app.js';

const live = ['CREATED', 'WAITING', 'DISPATCHED', 'RUNNING', 'RETRYING'];

function backfillRow(b, reload) {
  const n = b.instances || {};
  const inFlight = live.reduce((s, st) => s + (n[st] || 0), 0);
  const action = (what) => h('button', { type: 'button', class: 'small', 'data-action': what, 'data-id': b.id,
    onclick: async () => { await act(what + ' backfill ' + b.id, () => call('POST', `/v1/backfills/${b.id}/${what}`)); reload(); } }, what);
  const actions = [];
  if (b.state === 'running') actions.push(action('pause'));
  if (b.state === 'paused') actions.push(action('resume'));
  if (b.state === 'running' || b.state === 'paused') actions.push(' ', action('cancel'));
  const done = (n.SUCCEEDED || 0) + (n.FAILED || 0) + (n.SKIPPED || 0) + (n.CANCELLED || 0);
  return [h('span', { class: 'backfill-id' }, String(b.id)), taskLink(b.task), fmtTime(b.from), fmtTime(b.to),
    h('span', { class: 'backfill-state' }, b.state),
    h('span', { class: 'backfill-progress' }, `${done} / ${b.total} ticks done`),
    `${b.fired} fired, ${b.existing} found run`, `${n.SUCCEEDED || 0} ok, ${n.FAILED || 0} failed, ${inFlight} in flight`, actions];
}

/** backfillsView lists the backfills with their progress and actions. */
export async function backfillsView() {
  const body = h('div', { id: 'backfills' });
  const load = async () => {
    const { backfills = [] } = await get('/v1/backfills');
    fill(body, table(['id', 'task', 'from', 'to', 'state', 'progress', 'ticks', 'instances', ''],
      backfills.map((b) => backfillRow(b, load)), 'No backfills. Start one with ax backfill TASK --from --to.'));
  };
  await load();
  const timer = setInterval(() => { if (location.hash.startsWith('#/backfills')) load().catch(() => {}); else clearInterval(timer); }, 3000);
  showPage(h('h1', {}, 'Backfills'), card('Backfills', body));
}

/** deadLettersView shows the dead-letter groups, each with a replay. */
export async function deadLettersView() {
  const body = h('div', { id: 'dead-letters' });
  const load = async () => {
    const { groups = [] } = await get('/v1/dead-letters');
    draw(groups);
    return groups;
  };
  // A replay's reruns are created by the dispatcher from the firings it
  // publishes, a moment after the answer: the page looks again, once a
  // second for up to 30 s, until the group has left it.
  const replayed = async (g) => {
    for (let i = 0; i < 30 && location.hash.startsWith('#/dead-letters'); i++) {
      const groups = await load();
      if (!groups.some((x) => x.task === g.task && x.error_class === g.error_class && x.count >= g.count)) return;
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
  };
  const draw = (groups) => {
    fill(body, table(['task', 'error class', 'count', 'first seen', 'last seen', 'latest', 'replay'],
      groups.map((g) => {
        const patch = h('input', { class: 'replay-patch', placeholder: 'payload patch (JSON merge patch)', value: '' });
        const replay = h('button', { type: 'button', class: 'small replay', onclick: async () => {
          const req = { task: g.task, error_class: g.error_class };
          if (patch.value.trim()) {
            try { req.payload_patch = JSON.parse(patch.value); } catch (e) { fill(body, errorBox('the payload patch is not JSON: ' + e.message)); return; }
          }
          if (await act(`replay ${g.count} of ${g.task}`, () => call('POST', '/v1/dead-letters/replay', req)) !== undefined) {
            await replayed(g);
          }
        } }, 'replay');
        return [taskLink(g.task), h('code', { class: 'error-class' }, g.error_class), h('span', { class: 'dl-count' }, String(g.count)),
          fmtTime(g.first_seen), fmtTime(g.last_seen), instLink(g.latest_id), [patch, ' ', replay]];
      }), 'No dead letters: no instance failed for good.'));
  };
  await load();
  showPage(h('h1', {}, 'Dead letters'), card('Failed for good, by task and error class', body));
}

/** bulkView selects instances with a query (a dry run) and acts on them. */
export async function bulkView(query) {
  const params = new URLSearchParams(query);
  const field = (name, placeholder) => h('input', { name, id: 'bulk-' + name, placeholder, value: params.get(name) || '' });
  const fields = [field('task', 'task (required)'), field('state', 'state: FAILED,WAITING'), field('since', 'since: 24h or RFC 3339'),
    field('until', 'until'), field('error', 'error text'), field('worker', 'worker')];
  const out = h('div', { id: 'bulk-result' });
  const where = () => {
    const w = {};
    for (const f of fields) {
      const v = f.value.trim();
      if (!v) continue;
      if (f.name === 'state') w.state = v.toUpperCase().split(',').map((s) => s.trim());
      else if (f.name === 'since' || f.name === 'until') w[f.name] = /^\d+[smhd]$/.test(v) ? ago(v) : v;
      else w[f.name] = v;
    }
    return w;
  };
  const run = async (action, dryRun) => {
    try {
      const res = await call('POST', '/v1/instances/bulk/' + action, { where: where(), dry_run: dryRun, limit: 1000 });
      const rows = (res.instances || []).map((m) => [instLink(m.id), taskLink(m.task), badge(m.state), fmtTime(m.fired_at), m.worker_id || '', m.error || '']);
      const summary = dryRun
        ? h('p', { id: 'bulk-summary' }, `${res.matched} instances match.`)
        : h('p', { id: 'bulk-summary' }, `${action === 'cancel' ? 'Cancelled' : 'Reran'} ${res.acted} of ${res.matched} (audit record ${res.audit_id}).`);
      const buttons = dryRun && res.matched > 0
        ? h('p', {}, h('button', { type: 'button', id: 'bulk-rerun', onclick: () => act('rerun', () => run('rerun', false)) }, `Rerun these ${res.instances.length}`), ' ',
          h('button', { type: 'button', id: 'bulk-cancel', onclick: () => act('cancel', () => run('cancel', false)) }, `Cancel these ${res.instances.length}`))
        : null;
      fill(out, summary, buttons, table(['instance', 'task', 'state', 'fired', 'worker', 'error'], rows, 'Nothing matches.'));
    } catch (err) {
      fill(out, errorBox(err));
    }
  };
  const form = h('form', { class: 'filters', id: 'bulk-form' }, fields, h('button', { type: 'submit', id: 'bulk-preview' }, 'Select (dry run)'));
  form.addEventListener('submit', (e) => { e.preventDefault(); run('rerun', true); });
  showPage(h('h1', {}, 'Bulk actions'), card('Select instances by query, then act on them', form, out));
}

/** ago turns "24h" into the RFC 3339 time that long ago. */
function ago(v) {
  const n = parseInt(v, 10);
  const unit = { s: 1e3, m: 6e4, h: 36e5, d: 864e5 }[v.slice(-1)];
  return new Date(Date.now() - n * unit).toISOString();
}

/** rangeRoutes are the routes of these pages, for app.js's router. */
export const rangeRoutes = [
  [/^#\/backfills$/, () => backfillsView()],
  [/^#\/dead-letters$/, () => deadLettersView()],
  [/^#\/bulk$/, (m, q) => bulkView(q)],
];
