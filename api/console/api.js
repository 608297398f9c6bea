// api.js: the console's calls to the AX API, each with the token the user
// logged in with.

const tokenKey = 'ax.token';

/** token is where the API token lives: this tab's session storage. */
export const token = {
  get: () => sessionStorage.getItem(tokenKey) || '',
  set: (t) => sessionStorage.setItem(tokenKey, t),
  clear: () => sessionStorage.removeItem(tokenKey),
};

/** APIError is an answer of the API that is not a success. */
export class APIError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** unauthorized is called when the API refuses the token (401). */
let unauthorized = () => {};
export function onUnauthorized(f) { unauthorized = f; }

function headers(extra = {}) {
  return { Authorization: 'Bearer ' + token.get(), ...extra };
}

async function failure(res) {
  let code = 'http_' + res.status, message = res.status + ' ' + res.statusText;
  try {
    const body = await res.json();
    if (body && body.error) {
      code = body.error.code || code;
      message = body.error.message || message;
      // The message lists every problem already; several read better one
      // a line after the message's lead, as the CLI shows them.
      const problems = body.error.problems || [];
      if (problems.length > 1) {
        const lead = message.split(': ')[0];
        message = lead + ':' + problems.map((p) => '\n  - ' + (p.field ? p.field + ': ' : '') + p.message).join('');
      }
    }
  } catch { /* not JSON */ }
  if (res.status === 401) unauthorized();
  return new APIError(res.status, code, message);
}

/**
 * call sends a request to the API and returns its decoded JSON answer.
 * body is sent as JSON unless it is a string, which is sent with type.
 */
export async function call(method, path, body, type = 'application/json') {
  const init = { method, headers: headers() };
  if (body !== undefined) {
    init.headers['Content-Type'] = type;
    init.body = typeof body === 'string' ? body : JSON.stringify(body);
  }
  const res = await fetch(path, init);
  if (!res.ok) throw await failure(res);
  if (res.status === 204) return null;
  return res.json();
}

/** get is call('GET', ...) with query parameters; empty ones are left out. */
export function get(path, query = {}) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) {
    if (v !== undefined && v !== null && v !== '') q.set(k, v);
  }
  const qs = q.toString();
  return call('GET', qs ? path + '?' + qs : path);
}

/** text reads a plain-text answer, such as GET /metrics. */
export async function text(path) {
  const res = await fetch(path, { headers: headers() });
  if (!res.ok) throw await failure(res);
  return res.text();
}

/**
 * follow reads a stream of server-sent events with fetch (EventSource
 * cannot send the Authorization header) and calls onEvent({id, event, data})
 * for each event, until the stream ends or signal aborts it.
 */
export async function follow(path, onEvent, signal) {
  const res = await fetch(path, { headers: headers({ Accept: 'text/event-stream' }), signal });
  if (!res.ok) throw await failure(res);
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let end;
    while ((end = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, end);
      buf = buf.slice(end + 2);
      const ev = { id: '', event: 'message', data: '' };
      let hasData = false;
      for (const line of block.split('\n')) {
        if (line === '' || line.startsWith(':')) continue;
        const i = line.indexOf(':');
        const field = i < 0 ? line : line.slice(0, i);
        const val = i < 0 ? '' : line.slice(i + 1).replace(/^ /, '');
        if (field === 'data') { ev.data += (hasData ? '\n' : '') + val; hasData = true; }
        else if (field === 'event') ev.event = val;
        else if (field === 'id') ev.id = val;
      }
      if (hasData) onEvent(ev);
    }
  }
}

/** parseMetrics parses the Prometheus text format into {name, labels, value} samples. */
export function parseMetrics(body) {
  const out = [];
  const re = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/;
  const labelRe = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
  for (const line of body.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = re.exec(line);
    if (!m) continue;
    const labels = {};
    if (m[2]) for (const l of m[2].matchAll(labelRe)) labels[l[1]] = l[2];
    out.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return out;
}
