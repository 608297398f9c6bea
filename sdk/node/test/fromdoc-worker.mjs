// A minimal AX worker written from docs/executor-protocol.md alone, on the
// raw NATS packages (no AX SDK): it runs the conformance handlers so that
// `ax conformance executor` can check that the document is enough to write
// a worker (issue #14). test/fromdoc.test.ts runs the kit against it.
//
// Settings (environment): NATS_URL, NATS_USER, NATS_PASSWORD,
// NATS_INBOX_PREFIX, AX_POOLS (comma-separated, default "default"),
// AX_WORKER_ID (default fromdoc-<random>), AX_SLOTS (default 8).
// AX_DEV_DATA=<ax dev data folder> instead reads the worker's own user,
// executor-<worker id>, from <data>/nats-workers.json.

import { readFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { randomBytes } from "node:crypto";

import { connect, headers } from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";

const PROTOCOL = 1;
const PRIORITIES = ["urgent", "normal", "low"];
const HANDLERS = ["conformance.echo", "conformance.fail", "conformance.permanent", "conformance.sleep", "conformance.log"];
const SHUTDOWN_TIMEOUT_MS = 30_000;
const ABANDON_MS = 10_000;
const STARTED_DELAY_MS = 1_000;
const HEARTBEAT_MS = 5_000;
const IDLE_MS = 1_000;

const log = (...a) => console.log(new Date().toISOString(), ...a);

// ---- settings
let user = process.env.NATS_USER;
let pass = process.env.NATS_PASSWORD;
let inboxPrefix = process.env.NATS_INBOX_PREFIX;
const workerId = process.env.AX_WORKER_ID ?? `fromdoc-${randomBytes(4).toString("hex")}`;
if (process.env.AX_DEV_DATA && !user) {
  // ax dev's user of this worker (ax user add executor --ax-dev made it)
  const users = JSON.parse(readFileSync(path.join(process.env.AX_DEV_DATA, "nats-workers.json"), "utf8"));
  user = `executor-${workerId}`;
  pass = users.find((u) => u.name === user)?.password;
  if (!pass) throw new Error(`${process.env.AX_DEV_DATA}/nats-workers.json has no user ${user}: add it with ax user add executor --ax-dev`);
}
if (user && !inboxPrefix) inboxPrefix = `_INBOX_${user}`;
const servers = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const pools = (process.env.AX_POOLS ?? "default").split(",").map((s) => s.trim()).filter(Boolean);
const slots = Number(process.env.AX_SLOTS ?? 8);
if (!/^[A-Za-z0-9_-]{1,128}$/.test(workerId)) throw new Error(`AX_WORKER_ID ${JSON.stringify(workerId)} must match ^[A-Za-z0-9_-]{1,128}$`);
const nonce = randomBytes(12).toString("hex");

// ---- 1. connect
const nc = await connect({ servers, user, pass, inboxPrefix, name: `fromdoc ${workerId}` });
const js = jetstream(nc);
const jsm = await jetstreamManager(nc);
const enc = (v) => new TextEncoder().encode(JSON.stringify(v));
const dec = (b) => JSON.parse(new TextDecoder().decode(b));

// ---- 2. topology: look up, create nothing
for (const s of ["AX_DISPATCH", "AX_REPORTS", "AX_LOGS"]) {
  await jsm.streams.info(s).catch((err) => {
    throw new Error(`stream ${s} is missing (${err.message}): start ax dispatcher or ax dev first`);
  });
}
const kvm = new Kvm(js);
const buckets = {};
for (const b of ["ax-workers", "ax-leases", "ax-mutex", "ax-once"]) {
  buckets[b] = await kvm.open(b).catch((err) => {
    throw new Error(`bucket ${b} is missing (${err.message}): start ax dispatcher or ax dev first`);
  });
}
async function ttlOf(bucket) {
  const st = await buckets[bucket].status();
  if (!st.ttl) throw new Error(`bucket ${bucket} has no TTL`);
  return st.ttl; // milliseconds
}
let leaseTTL = await ttlOf("ax-leases");
// When the connection came back from losing its server (section 7: for a
// while after, every delivery asks the fence).
let reconnectedAt = 0;
(async () => {
  for await (const st of nc.status()) if (st.type === "reconnect") reconnectedAt = Date.now();
})();
const workersTTL = await ttlOf("ax-workers");
const heartbeatMs = Math.min(HEARTBEAT_MS, Math.floor(workersTTL / 3));

// ---- 3. consumers: create, never update
function fnv1a32(s) {
  let h = 0x811c9dc5;
  for (const byte of new TextEncoder().encode(s)) {
    h ^= byte;
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h.toString(16).padStart(8, "0");
}
function poolConsumerName(pool, priority, handler) {
  const readable = `${pool}_${priority}_${handler.replaceAll(".", "_")}`.slice(0, 200);
  return `pool_${readable}_${fnv1a32(`${pool}\x00${priority}\x00${handler}`)}`;
}
async function ensureConsumer(cfg) {
  try {
    await jsm.consumers.add("AX_DISPATCH", cfg, { action: "create" });
  } catch (err) {
    if (err?.code === 10148 || err?.api_error?.err_code === 10148 || /already exists/.test(String(err?.message))) {
      await jsm.consumers.info("AX_DISPATCH", cfg.durable_name); // use it as it is
      return;
    }
    throw new Error(`create consumer ${cfg.durable_name}: ${err.message}`);
  }
}
const ownName = `worker_${workerId}`;
await ensureConsumer({
  durable_name: ownName, filter_subject: `ax.dispatch.worker.${workerId}`, ack_policy: "explicit",
  ack_wait: 30e9, max_ack_pending: -1, inactive_threshold: 3600e9, metadata: { ax_worker: workerId },
  description: `AX executor ${workerId}: the work routed to it alone`,
});
const queues = [{ name: ownName }];
for (const priority of PRIORITIES) {
  for (const pool of pools) {
    for (const handler of [...HANDLERS].sort()) {
      const name = poolConsumerName(pool, priority, handler);
      await ensureConsumer({
        durable_name: name, filter_subject: `ax.dispatch.${pool}.${priority}.${handler}`, ack_policy: "explicit",
        ack_wait: 30e9, max_ack_pending: -1, metadata: { ax_pool: pool, ax_priority: priority, ax_handler: handler },
        description: `AX executors of pool ${pool} with handler ${handler}, priority ${priority}`,
      });
      queues.push({ name });
    }
  }
}

// ---- state
const running = new Map(); // "<instance>.<attempt>" -> attempt
let stopping = false;
let wake = () => {};
const startedAt = new Date().toISOString();

// ---- 4. subscribe, register, heartbeat
const control = nc.subscribe(`ax.control.${workerId}`, {
  callback: (err, m) => {
    if (err) return;
    let c;
    try { c = dec(m.data); } catch { return; }
    if (c.action !== "cancel") return;
    for (const a of running.values()) {
      if (a.d.instance_id === c.instance_id && (c.attempt === 0 || a.d.attempt === c.attempt)) a.stop(`cancelled: ${c.reason}`);
    }
  },
});
const doorbells = [...pools.map((p) => `ax.ready.${p}.>`), `ax.ready.worker.${workerId}`].map((s) =>
  nc.subscribe(s, { callback: () => wake() }));

function record() {
  return { id: workerId, hostname: os.hostname(), version: "0.1.0", pools, handlers: HANDLERS, slots, busy: running.size,
    started_at: startedAt, heartbeat_at: new Date().toISOString(), protocol: PROTOCOL };
}
// The grant keys, one per pool and handler, published before the record on
// the same connection (a pool may hold "+", which a KV key may not).
function putGrants(del = false) {
  const h = del ? headers() : undefined;
  h?.set("KV-Operation", "DEL");
  for (const p of pools) for (const name of HANDLERS) nc.publish(`$KV.ax-workers.${workerId}.${p}.${name}`, undefined, h ? { headers: h } : undefined);
}
putGrants();
await buckets["ax-workers"].put(workerId, enc(record()));
const heartbeat = setInterval(() => {
  putGrants();
  buckets["ax-workers"].put(workerId, enc(record())).catch((err) => log("heartbeat:", err.message));
}, heartbeatMs);

// ---- lease renewals, every third of the TTL read again each time
let renewTimer;
async function renew() {
  try { leaseTTL = await ttlOf("ax-leases"); } catch (err) { log("read the leases TTL:", err.message); }
  await Promise.all([...running.values()].filter((a) => a.revision && !a.final).map(async (a) => {
    try {
      const ack = await js.publish(a.leaseSubject, enc(a.lease), { expect: { lastSubjectSequence: a.revision } });
      a.revision = ack.seq;
    } catch (err) {
      if (isWrongSequence(err)) {
        a.leaseLost = true;
        a.stop("lease lost");
      } else log(`renew ${a.leaseSubject}:`, err.message);
    }
  }));
  if (!closed) renewTimer = setTimeout(renew, Math.max(100, Math.floor(leaseTTL / 3)));
}
let closed = false;
renewTimer = setTimeout(renew, Math.max(100, Math.floor(leaseTTL / 3)));

function isWrongSequence(err) {
  const code = err?.api_error?.err_code ?? err?.code;
  return code === 10071 || code === 10164 || /wrong last sequence/i.test(String(err?.message));
}

// ---- 5. fetch: a no-wait pull of one message at a time
async function pullOne(name) {
  const m = await nc.request(`$JS.API.CONSUMER.MSG.NEXT.AX_DISPATCH.${name}`, enc({ batch: 1, no_wait: true }),
    // noMux: the message arrives on the inbox but carries its stream subject,
    // which the client's shared request inbox cannot match to the request
    { timeout: 5000, noMux: true });
  if (m.headers && m.headers.code >= 400) return undefined; // 404 no messages, 408 request expired
  if (!m.reply) return undefined;
  return m;
}
function deliveries(m) {
  // $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>, or with
  // <domain>.<account hash> after $JS.ACK (and a token at the end).
  const t = m.reply.split(".");
  return Number(t.length >= 12 ? t[6] : t[4]);
}
const nak = (m, delayMs) => m.respond(delayMs ? `-NAK ${JSON.stringify({ delay: delayMs * 1e6 })}` : "-NAK");

async function fetchRound() {
  for (const q of queues) {
    while (!stopping && running.size < slots) {
      let m;
      try { m = await pullOne(q.name); } catch (err) { log(`pull ${q.name}:`, err.message); break; }
      if (!m) break;
      await admit(m);
    }
    if (stopping || running.size >= slots) return;
  }
}
async function fetchLoop() {
  while (!stopping) {
    await fetchRound();
    await new Promise((r) => {
      const t = setTimeout(r, IDLE_MS);
      wake = () => { clearTimeout(t); r(); };
    });
    wake = () => {};
  }
}

// ---- 6. admit, 7. fence and lease
async function admit(m) {
  let d;
  try { d = dec(m.data); } catch { d = undefined; }
  if (!d || typeof d !== "object" || !(d.instance_id >= 1) || !(d.attempt >= 1)) {
    log("a dispatch message that does not decode: terminated");
    m.respond("+TERM");
    return;
  }
  if ((d.protocol ?? 1) > PROTOCOL) return nak(m, 30_000);
  if (!HANDLERS.includes(d.handler)) return nak(m, 30_000);
  if (running.size >= slots) return nak(m, 1000);
  if (stopping) return nak(m);
  const recent = reconnectedAt > 0 && Date.now() - reconnectedAt < Math.max(leaseTTL, 10_000);
  if (recent || deliveries(m) > 1 || d.republished === true) {
    let answer;
    try {
      const r = await nc.request(`ax.fence.${d.pool ?? "default"}.${workerId}.${d.instance_id}`,
        enc({ instance_id: d.instance_id, attempt: d.attempt, worker_id: workerId }), { timeout: 5000 });
      answer = dec(r.data);
      if (typeof answer?.start !== "boolean") throw new Error("a bad fence reply");
    } catch (err) {
      log(`fence ${d.instance_id}.${d.attempt}:`, err.message);
      return nak(m, IDLE_MS);
    }
    if (!answer.start) {
      log(`fence says not to start ${d.instance_id}.${d.attempt}: ${answer.reason}`);
      m.respond("+TERM");
      return;
    }
  }
  const startedAtAttempt = new Date().toISOString();
  const lease = { instance_id: d.instance_id, attempt: d.attempt, worker_id: workerId, acquired_at: startedAtAttempt };
  const leaseSubject = `$KV.ax-leases.${d.instance_id}.${d.attempt}`;
  let revision;
  try {
    revision = (await js.publish(leaseSubject, enc(lease), { expect: { lastSubjectSequence: 0 } })).seq;
  } catch (err) {
    if (isWrongSequence(err)) {
      m.respond("+TERM");
      return;
    }
    log(`lease ${d.instance_id}.${d.attempt}:`, err.message);
    return nak(m, IDLE_MS);
  }
  try {
    await nc.request(m.reply, "+ACK", { timeout: 10_000 }); // a double ack: run only once it is confirmed
  } catch (err) {
    log(`ack ${d.instance_id}.${d.attempt} not confirmed, not running it:`, err.message);
    return;
  }
  const a = new Attempt(d, lease, leaseSubject, revision, startedAtAttempt);
  running.set(`${d.instance_id}.${d.attempt}`, a);
  a.run().catch((err) => log(`attempt ${d.instance_id}.${d.attempt}:`, err.stack));
}

// ---- 8. run, 9. report, 10. logs
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
function goDuration(ms) {
  if (ms % 3_600_000 === 0) return `${ms / 3_600_000}h0m0s`;
  if (ms % 60_000 === 0) return `${Math.floor(ms / 3_600_000) ? Math.floor(ms / 3_600_000) + "h" : ""}${(ms / 60_000) % 60}m0s`;
  if (ms >= 1000) return `${ms / 1000}s`;
  return `${ms}ms`;
}
async function publishReport(a, body) {
  const final = body.kind !== "started";
  const id = `${a.d.instance_id}-${a.d.attempt}-${final ? "final" : "started"}-${nonce}`;
  const subject = `ax.report.${a.d.pool ?? "default"}.${workerId}.${a.d.instance_id}`;
  const backoff = [100, 300, 1000, 3000];
  for (let i = 0; ; i++) {
    try {
      await js.publish(subject, enc(body), { msgID: id });
      return true;
    } catch (err) {
      if (i >= backoff.length) {
        log(`report ${id}: ${err.message}; the lease will expire`);
        return false;
      }
      await sleep(backoff[i]);
    }
  }
}

class Attempt {
  constructor(d, lease, leaseSubject, revision, startedAt) {
    Object.assign(this, { d, lease, leaseSubject, revision, startedAt });
    this.ctl = new AbortController();
    this.lines = [];
    this.final = false;
    this.leaseLost = false;
  }
  stop(reason) {
    if (!this.ctl.signal.aborted) this.ctl.abort(new Error(reason));
  }
  log(message, fields) {
    const line = { instance_id: this.d.instance_id, task: this.d.task, attempt: this.d.attempt, worker_id: workerId,
      level: "info", message, time: new Date().toISOString() };
    if (fields && Object.keys(fields).length) line.fields = fields;
    this.lines.push(line);
  }
  async flushLogs() {
    const lines = this.lines.splice(0);
    await Promise.all(lines.map((l) => js.publish(`ax.log.${this.d.instance_id}.${workerId}`, enc(l)).catch((err) => log("log line:", err.message))));
  }
  report(kind, extra = {}) {
    return { instance_id: this.d.instance_id, attempt: this.d.attempt, worker_id: workerId, kind,
      at: new Date().toISOString(), started_at: this.startedAt, ...extra };
  }
  async run() {
    const d = this.d;
    let outcome; // {ok: true, output} | {ok: false, error, permanent}
    let deadline;
    // the started report: only for an attempt still running after the started delay
    let started;
    const startedTimer = setTimeout(() => (started = publishReport(this, this.report("started"))), STARTED_DELAY_MS);
    if (d.mutex_template) {
      outcome = { ok: false, error: `this worker cannot render mutex templates (${d.mutex_template}): it runs no attempt without its mutex`, permanent: true };
    } else {
      if (d.timeout_ms > 0) deadline = setTimeout(() => this.stop(`timeout after ${goDuration(d.timeout_ms)}`), d.timeout_ms);
      const handler = run(d.handler, this, d.payload).then((output) => ({ ok: true, output }),
        (err) => ({ ok: false, error: String(err?.message ?? err) || "failed", permanent: !!err?.permanent }));
      const aborted = new Promise((r) => this.ctl.signal.addEventListener("abort", r, { once: true }));
      outcome = await Promise.race([handler, aborted.then(() => Promise.race([handler, sleep(ABANDON_MS).then(() => undefined)]))]);
      clearTimeout(deadline);
      if (this.ctl.signal.aborted && (outcome === undefined || outcome.ok)) {
        // a stop the handler ignored (abandoned) or outran: the stop's cause wins,
        // except a drain's stop, after which a result is reported succeeded.
        if (!(outcome?.ok && this.draining)) outcome = { ok: false, error: this.ctl.signal.reason.message, permanent: false, abandoned: outcome === undefined };
      } else if (this.ctl.signal.aborted && !outcome.ok) {
        outcome.error = this.ctl.signal.reason.message;
      }
    }
    clearTimeout(startedTimer);
    await started; // it must reach the stream before the final report
    this.final = true;
    try {
      if (this.leaseLost) return; // the dispatcher failed it already: do not report
      await this.flushLogs();
      let body;
      if (outcome.ok) {
        body = this.report("succeeded", outcome.output === undefined ? {} : { output: outcome.output });
        if (enc(body).length > nc.info.max_payload - 4096) body = this.report("failed", { error: "the output is larger than NATS's max payload less 4 KiB", permanent: true });
      } else if (this.draining) {
        body = this.report("released", { error: `handed back: worker ${workerId} stopped and its shutdown timeout of ${SHUTDOWN_TIMEOUT_MS / 1000}s passed before the handler returned` });
      } else {
        body = this.report("failed", { error: outcome.error, permanent: outcome.permanent });
      }
      const ok = await publishReport(this, body);
      if (ok && body.kind === "released") await buckets["ax-leases"].delete(`${d.instance_id}.${d.attempt}`).catch((err) => log("delete lease:", err.message));
    } finally {
      running.delete(`${d.instance_id}.${d.attempt}`);
      wake();
    }
  }
}

class PermanentError extends Error {
  permanent = true;
}
const abortable = (ms, signal) => new Promise((resolve, reject) => {
  const t = setTimeout(resolve, ms);
  signal.addEventListener("abort", () => { clearTimeout(t); reject(signal.reason); }, { once: true });
});

// the conformance handlers (docs/executor-protocol.md, "Conformance handlers")
async function run(handler, a, payload) {
  const p = payload && typeof payload === "object" ? payload : {};
  switch (handler) {
    case "conformance.echo":
      return payload;
    case "conformance.fail": {
      const n = p.failures ?? 2;
      if (a.d.attempt <= n) throw new Error(`conformance: attempt ${a.d.attempt} fails on purpose`);
      return { attempt: a.d.attempt };
    }
    case "conformance.permanent":
      throw new PermanentError("conformance: permanent failure");
    case "conformance.sleep": {
      const ms = p.ms ?? 1000;
      await abortable(ms, a.ctl.signal);
      return { slept_ms: ms };
    }
    case "conformance.log": {
      const n = p.lines ?? 3;
      for (let i = 1; i <= n; i++) a.log(`conformance line ${i} of ${n}`, { i });
      return { lines: n };
    }
  }
  throw new Error(`no handler ${handler}`);
}

// ---- 13. shutdown and drain
async function shutdown(signal) {
  if (stopping) return;
  stopping = true;
  log(`${signal}: draining`);
  wake();
  for (const s of doorbells) s.unsubscribe();
  const done = () => running.size === 0;
  const end = Date.now() + SHUTDOWN_TIMEOUT_MS;
  while (!done() && Date.now() < end) await sleep(100);
  if (!done()) {
    for (const a of running.values()) {
      a.draining = true;
      a.stop("worker shutting down");
    }
    const end2 = Date.now() + ABANDON_MS + 5000;
    while (!done() && Date.now() < end2) await sleep(100);
  }
  control.unsubscribe();
  clearInterval(heartbeat);
  closed = true;
  clearTimeout(renewTimer);
  putGrants(true);
  await buckets["ax-workers"].delete(workerId).catch((err) => log("delete the worker record:", err.message));
  await nc.drain();
  log("stopped");
  process.exit(0);
}
process.on("SIGTERM", () => shutdown("SIGTERM"));
process.on("SIGINT", () => shutdown("SIGINT"));

log(`worker ${workerId} of pools ${pools.join(",")} runs ${HANDLERS.join(", ")}; SIGTERM drains it`);
fetchLoop().catch((err) => {
  log("fetch loop:", err.stack);
  process.exit(1);
});
