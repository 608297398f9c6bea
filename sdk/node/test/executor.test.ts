// The Node SDK against a real ax dev: every case fires through the HTTP
// API and reads the outcome there, as a user would.

import assert from "node:assert/strict";
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";

import { existsSync, mkdirSync, readFileSync, symlinkSync } from "node:fs";
import path from "node:path";

import { randomBytes } from "node:crypto";

import { connect, createInbox, type Msg, type NatsConnection } from "@nats-io/transport-node";
import { context, SpanKind, SpanStatusCode, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";

import { CancelledError, checkProgress, connectExecutor, inboxPrefix, PermanentError, RetryAfterError, TimeoutError, Topology, Worker, type Logger } from "../src/index.js";
import { Dev, waitFor } from "./harness.js";

const dev = new Dev();
let nc: NatsConnection;
let worker: Worker;
let running: Promise<void>;
const children: ChildProcess[] = [];

// What the handlers saw, by instance id.
const seen = new Map<number, { reason?: unknown; attempts: number[]; fences?: number[] }>();
// Handlers that wait for the test to let them go, by instance id.
const gates = new Map<number, () => void>();
const note = (id: number, attempt: number) => {
  const s = seen.get(id) ?? { attempts: [] };
  s.attempts.push(attempt);
  seen.set(id, s);
  return s;
};

// Lets the handler of instance id go on to its next step.
const step = (id: number) => {
  const go = gates.get(id);
  assert.ok(go, `the handler of instance ${id} does not wait`);
  gates.delete(id);
  go();
};
const gate = (id: number) => new Promise<void>((resolve) => gates.set(id, resolve));
// What the burst handler measured and met, by instance id.
const burst = new Map<number, { pacedMs?: number; after?: unknown }>();

const quiet: Logger = { debug() {}, info() {}, warn() {}, error() {} };

// The application's OpenTelemetry SDK, as a user registers it: the
// worker's spans end here.
const spans = new InMemorySpanExporter();
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] }));
// The span node.echo's handler ran in, and its ctx.traceparent, by instance id.
const echoTraces = new Map<number, { spanId?: string; traceparent?: string }>();

before(async () => {
  await dev.start();
  // Its user may pull node.fenced's queue too: the fence test takes an attempt by hand.
  nc = await connectExecutor(dev.workerCredentials("node-test-main",
    ["node.burst", "node.echo", "node.fenced", "node.flaky", "node.permanent", "node.progress", "node.snooze", "node.wait"]));
  worker = new Worker({ connection: nc, workerId: "node-test-main", slots: 4, logger: process.env.AX_TEST_VERBOSE ? undefined : quiet });
  worker.handle<{ name: string }>("node.echo", async (ctx, p) => {
    ctx.logger.info("hello from node", { name: p.name });
    echoTraces.set(ctx.instanceId, { spanId: trace.getActiveSpan()?.spanContext().spanId, traceparent: ctx.traceparent });
    return { hello: p.name, attempt: ctx.attempt, max_attempts: ctx.maxAttempts };
  }, {
    parse: (raw) => {
      const p = raw as { name?: unknown };
      if (typeof p !== "object" || p === null || typeof p.name !== "string") throw new Error("want {\"name\": string}");
      return { name: p.name };
    },
  });
  worker.handle("node.flaky", async (ctx) => {
    const s = note(ctx.instanceId, ctx.attempt);
    (s.fences ??= []).push(ctx.fence);
    if (ctx.attempt < 3) throw new Error(`flaky failure on attempt ${ctx.attempt}`);
    return { attempt: ctx.attempt };
  });
  worker.handle("node.snooze", async (ctx) => {
    note(ctx.instanceId, ctx.attempt);
    if (ctx.attempt === 1) throw new RetryAfterError(1500, "not yet: the file is not there");
    return { attempt: ctx.attempt };
  });
  worker.handle("node.permanent", async (ctx) => {
    note(ctx.instanceId, ctx.attempt);
    throw new PermanentError("the input can never work");
  });
  worker.handle("node.wait", async (ctx) => {
    const s = note(ctx.instanceId, ctx.attempt);
    await new Promise<void>((resolve, reject) => {
      gates.set(ctx.instanceId, resolve);
      ctx.signal.addEventListener("abort", () => {
        s.reason = ctx.signal.reason;
        reject(ctx.signal.reason);
      }, { once: true });
    });
    return { released: true };
  });
  worker.handle("node.progress", async (ctx) => {
    for (let i = 1; i <= 3; i++) {
      ctx.progress(i, 3, `step ${i} of 3`);
      await gate(ctx.instanceId);
    }
    return { steps: 3 };
  });
  worker.handle("node.burst", async (ctx) => {
    const b: { pacedMs?: number; after?: unknown } = {};
    burst.set(ctx.instanceId, b);
    ctx.progress(1, 100, "first");
    await gate(ctx.instanceId);
    for (let i = 2; i <= 50; i++) ctx.progress(i, 100, "burst"); // in one turn of the event loop
    await gate(ctx.instanceId);
    const t0 = Date.now();
    for (let i = 51; i <= 90; i++) {
      ctx.progress(i, 100, "paced");
      await new Promise((r) => setTimeout(r, 50));
    }
    b.pacedMs = Date.now() - t0;
    await gate(ctx.instanceId);
    ctx.progress(99, 100, "never sent");
    setImmediate(() => {
      try {
        ctx.progress(100, 100, "after the end");
      } catch (err) {
        b.after = err;
      }
    });
    return { burst: true };
  });
  running = worker.run();
  await worker.ready();
});

after(async () => {
  for (const c of children) if (c.exitCode === null) c.kill("SIGKILL");
  await worker?.stop();
  await running?.catch(() => undefined);
  await nc?.close();
  await dev.stop();
});

function spawnWorker(id: string, env: Record<string, string> = {}): { proc: ChildProcess; ready: Promise<void>; exited: Promise<number | null>; output: () => string } {
  const creds = dev.workerCredentials(id, ["node.fenced", "node.hold", "node.slow"]);
  const proc = spawn(process.execPath, [fileURLToPath(new URL("./worker-process.js", import.meta.url))], {
    env: { ...process.env, NATS_URL: creds.servers, NATS_USER: creds.user, NATS_PASSWORD: creds.pass, NATS_INBOX_PREFIX: creds.inboxPrefix, AX_WORKER_ID: id, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  children.push(proc);
  let out = "";
  proc.stdout!.on("data", (b: Buffer) => (out += b.toString()));
  proc.stderr!.on("data", (b: Buffer) => (out += b.toString()));
  const exited = new Promise<number | null>((r) => proc.once("exit", (code) => r(code)));
  const ready = waitFor(`worker ${id} to be ready`, (): boolean => {
    if (proc.exitCode !== null) throw new Error(`worker ${id} exited: ${out}`);
    return out.includes("ready\n");
  });
  return { proc, ready: ready.then(() => undefined), exited, output: () => out };
}

describe("a Node worker", () => {
  test("registers in ax-workers with its pools, handlers and slots", async () => {
    const r = await dev.api<{ workers: Array<{ id: string; pools: string[]; handlers: string[]; slots: number; version: string }> }>("GET", "/v1/workers");
    const w = r.workers.find((w) => w.id === "node-test-main");
    assert.ok(w, `node-test-main is not among the workers: ${JSON.stringify(r.workers)}`);
    assert.deepEqual(w.pools, ["default"]);
    assert.deepEqual(w.handlers, ["node.burst", "node.echo", "node.flaky", "node.permanent", "node.progress", "node.snooze", "node.wait"]);
    assert.equal(w.slots, 4);
    assert.equal(w.version, "0.1.0");
  });

  test("succeeds: the output and the task log reach the API", async () => {
    await dev.applyTask("node-echo", "node.echo");
    const id = await dev.fire("node-echo", { name: "world" });
    const inst = await dev.waitState(id, ["SUCCEEDED", "FAILED"]);
    assert.equal(inst.state, "SUCCEEDED", JSON.stringify(inst));
    assert.equal(inst.worker_id, "node-test-main");
    assert.deepEqual(inst.output, { hello: "world", attempt: 1, max_attempts: 1 });
    const logs = await dev.api<{ lines: Array<{ message: string; level: string; fields?: Record<string, unknown>; worker_id: string; attempt: number }> }>("GET", `/v1/instances/${id}/logs`);
    const line = logs.lines.find((l) => l.message === "hello from node");
    assert.ok(line, `no "hello from node" line in ${JSON.stringify(logs.lines)}`);
    assert.equal(line.level, "info");
    assert.deepEqual(line.fields, { name: "world" });
    assert.equal(line.worker_id, "node-test-main");
    assert.equal(line.attempt, 1);
  });

  test("a payload that does not fit fails permanently, saying why", async () => {
    await dev.applyTask("node-echo-bad", "node.echo", { retry: { max_attempts: 3, backoff: "fixed", initial_interval_sec: 1, max_interval_sec: 1 } });
    const id = await dev.fire("node-echo-bad", { nom: 1 });
    const inst = await dev.waitState(id, ["FAILED", "SUCCEEDED"]);
    assert.equal(inst.state, "FAILED");
    assert.equal(inst.attempt, 1, "a permanent failure is not retried");
    assert.match(String(inst.error), /payload does not fit: want \{"name": string\}/);
  });

  test("an attempt it cannot serve as the task says (a mutex key, an encoded payload) fails permanently, saying so", async () => {
    await dev.api("POST", "/v1/tasks", {
      task_name: "node-mutex", owner: "node-sdk-test", description: "a task with a mutex key",
      triggers: [{ type: "manual" }], concurrency: { mutex_key: "order-{{.name}}" },
      execution: { handler: "node.echo", timeout: "30s", retry: { max_attempts: 3, backoff: "fixed", initial_interval_sec: 1, max_interval_sec: 1 } },
    });
    const mutex = await dev.waitState(await dev.fire("node-mutex", { name: "a" }), ["FAILED", "SUCCEEDED"]);
    assert.equal(mutex.state, "FAILED");
    assert.equal(mutex.attempt, 1);
    assert.match(String(mutex.error), /has a concurrency.mutex_key \(order-\{\{.name\}\}\), which the Node SDK does not hold/);

    await dev.applyTask("node-encoded", "node.echo", { retry: { max_attempts: 3, backoff: "fixed", initial_interval_sec: 1, max_interval_sec: 1 } });
    const encoded = await dev.waitState(await dev.fire("node-encoded", { ax_codec: "aes-gcm/v1", key_id: "k1", data: "AAAA" }), ["FAILED", "SUCCEEDED"]);
    assert.equal(encoded.state, "FAILED");
    assert.equal(encoded.attempt, 1);
    assert.match(String(encoded.error), /payload is encoded \(ax_codec aes-gcm\/v1, key_id k1\) and this worker has no codec/);
  });

  test("retries a failing attempt by the task's policy until it succeeds", async () => {
    await dev.applyTask("node-flaky", "node.flaky", { retry: { max_attempts: 3, backoff: "fixed", initial_interval_sec: 1, max_interval_sec: 1 } });
    const id = await dev.fire("node-flaky");
    const inst = await dev.waitState(id, ["SUCCEEDED", "FAILED"]);
    assert.equal(inst.state, "SUCCEEDED", JSON.stringify(inst));
    assert.equal(inst.attempt, 3);
    assert.deepEqual(seen.get(id)?.attempts, [1, 2, 3]);
    // Each attempt's fencing token is greater than the one before.
    const fences = seen.get(id)?.fences ?? [];
    assert.equal(fences.length, 3);
    assert.ok(fences[0] > 0 && fences[0] < fences[1] && fences[1] < fences[2], `fences ${fences}: not increasing`);
    const retrying = inst.transitions.filter((t) => t.to === "RETRYING");
    assert.equal(retrying.length, 2, JSON.stringify(inst.transitions));
  });

  test("a RetryAfterError runs the next attempt after its wait, not the backoff", async () => {
    // The backoff would wait 10 minutes.
    await dev.applyTask("node-snooze", "node.snooze", { retry: { max_attempts: 3, backoff: "fixed", initial_interval_sec: 600, max_interval_sec: 600 } });
    const id = await dev.fire("node-snooze");
    const inst = await dev.waitState(id, ["SUCCEEDED", "FAILED"]);
    assert.equal(inst.state, "SUCCEEDED", JSON.stringify(inst));
    assert.equal(inst.attempt, 2);
    const t = inst.transitions;
    const failed = t.find((x) => x.to === "RETRYING" && x.attempt === 1);
    const next = t.find((x) => x.to === "DISPATCHED" && x.attempt === 2);
    assert.ok(failed && next, JSON.stringify(t));
    const waited = Date.parse(next.at) - Date.parse(failed.at);
    assert.ok(waited >= 1400, `attempt 2 was dispatched ${waited} ms after attempt 1 failed; it asked for 1500`);
  });

  test("a PermanentError fails the instance without a retry", async () => {
    await dev.applyTask("node-permanent", "node.permanent", { retry: { max_attempts: 3, backoff: "fixed", initial_interval_sec: 1, max_interval_sec: 1 } });
    const id = await dev.fire("node-permanent");
    const inst = await dev.waitState(id, ["FAILED", "SUCCEEDED"]);
    assert.equal(inst.state, "FAILED");
    assert.equal(inst.attempt, 1);
    assert.equal(inst.error, "the input can never work");
    assert.deepEqual(seen.get(id)?.attempts, [1]);
  });

  test("reports started after the started delay, then the result", async () => {
    await dev.applyTask("node-started", "node.wait");
    const id = await dev.fire("node-started");
    // The handler holds until released: the instance is RUNNING on the
    // started report alone.
    const inst = await dev.waitState(id, ["RUNNING"]);
    assert.equal(inst.worker_id, "node-test-main");
    const running = inst.transitions.find((t) => t.to === "RUNNING");
    assert.ok(running && !running.reason, `RUNNING came with the final report: ${JSON.stringify(inst.transitions)}`);
    gates.get(id)!();
    const done = await dev.waitState(id, ["SUCCEEDED", "FAILED"]);
    assert.equal(done.state, "SUCCEEDED");
    assert.deepEqual(done.output, { released: true });
  });

  test("times out at the dispatch's timeout: the signal aborts with a TimeoutError", async () => {
    await dev.applyTask("node-timeout", "node.wait", { timeout: "2s" });
    const id = await dev.fire("node-timeout");
    const inst = await dev.waitState(id, ["FAILED", "SUCCEEDED"]);
    assert.equal(inst.state, "FAILED");
    assert.equal(inst.error, "timeout after 2s");
    assert.ok(seen.get(id)?.reason instanceof TimeoutError, `the signal's reason is ${String(seen.get(id)?.reason)}`);
  });

  test("a cancel through the API aborts the running attempt", async () => {
    await dev.applyTask("node-cancel", "node.wait");
    const id = await dev.fire("node-cancel");
    await dev.waitState(id, ["RUNNING"]);
    await dev.api("POST", `/v1/instances/${id}/cancel`, { reason: "the test says stop" });
    const inst = await dev.waitState(id, ["CANCELLED", "FAILED", "SUCCEEDED"]);
    assert.equal(inst.state, "CANCELLED");
    const reason = await waitFor("the handler to see the cancel", () => seen.get(id)?.reason);
    assert.ok(reason instanceof CancelledError, `the signal's reason is ${String(reason)}`);
    assert.match(reason.message, /^cancelled/);
  });

  test("kill -9 of the worker mid-attempt: the retry runs on another worker", async () => {
    await dev.applyTask("node-kill", "node.hold", { retry: { max_attempts: 3, backoff: "fixed", initial_interval_sec: 1, max_interval_sec: 1 } });
    const a = spawnWorker("node-test-killed");
    await a.ready;
    const id = await dev.fire("node-kill");
    const inst = await dev.waitState(id, ["RUNNING"]);
    assert.equal(inst.worker_id, "node-test-killed");
    const b = spawnWorker("node-test-survivor", { AX_HOLD: "0" });
    try {
      await b.ready;
      a.proc.kill("SIGKILL");
      await a.exited;
      const done = await dev.waitState(id, ["SUCCEEDED", "FAILED"], 90_000);
      assert.equal(done.state, "SUCCEEDED", JSON.stringify(done));
      assert.equal(done.worker_id, "node-test-survivor", JSON.stringify(done));
      assert.equal(done.attempt, 2, JSON.stringify(done.transitions));
      assert.deepEqual(done.output, { worker: "node-test-survivor" });
      b.proc.kill("SIGTERM");
      assert.equal(await b.exited, 0, b.output());
    } finally {
      // The survivor serves every node handler: left running after a
      // failed check, it would take the next tests' attempts.
      a.proc.kill("SIGKILL");
      b.proc.kill("SIGKILL");
      await b.exited;
    }
  });

  test("SIGTERM drains: the running attempt finishes, the worker leaves ax-workers and exits 0", async () => {
    await dev.applyTask("node-drain", "node.slow");
    const w = spawnWorker("node-test-drained", { AX_SLOW_MS: "3000" });
    await w.ready;
    const id = await dev.fire("node-drain");
    await dev.waitState(id, ["RUNNING"]);
    w.proc.kill("SIGTERM");
    assert.equal(await w.exited, 0, w.output());
    // Its final report is stored before it exits; the dispatcher applies it soon after.
    const inst = await dev.waitState(id, ["SUCCEEDED", "FAILED", "RETRYING"]);
    assert.equal(inst.state, "SUCCEEDED", JSON.stringify(inst));
    assert.deepEqual(inst.output, { slept_ms: 3000, worker: "node-test-drained" });
    const r = await dev.api<{ workers: Array<{ id: string }> }>("GET", "/v1/workers");
    assert.ok(!r.workers.some((x) => x.id === "node-test-drained"), `the drained worker is still listed: ${JSON.stringify(r.workers)}`);
  });
});

describe("traces", () => {
  test("an attempt is a span of the firing's trace, its handler runs in it, and the span says how it ended", async () => {
    await dev.applyTask("node-echo", "node.echo");
    const traceId = randomBytes(16).toString("hex");
    const id = await dev.fire("node-echo", { name: "traced" }, { traceparent: `00-${traceId}-${randomBytes(8).toString("hex")}-01` });
    assert.equal((await dev.waitState(id, ["SUCCEEDED", "FAILED"])).state, "SUCCEEDED");
    const span = await waitFor(`the span of instance ${id}`, () => spans.getFinishedSpans().find((s) => s.attributes["ax.instance_id"] === id));
    assert.equal(span.name, "ax.executor.run");
    assert.equal(span.kind, SpanKind.CONSUMER);
    assert.equal(span.spanContext().traceId, traceId, "the attempt's span is not in the trace of the firing's request");
    const parent = span.parentSpanContext;
    assert.ok(parent && parent.isRemote && parent.traceId === traceId, `the span's parent ${JSON.stringify(parent)} is not the dispatch message's`);
    assert.deepEqual(
      { task: span.attributes["ax.task"], attempt: span.attributes["ax.attempt"], pool: span.attributes["ax.pool"], handler: span.attributes["ax.handler"], worker: span.attributes["ax.worker_id"], outcome: span.attributes["ax.outcome"] },
      { task: "node-echo", attempt: 1, pool: "default", handler: "node.echo", worker: "node-test-main", outcome: "succeeded" });
    assert.equal(span.status.code, SpanStatusCode.UNSET);
    // The handler ran in the span; ctx.traceparent names it.
    assert.deepEqual(echoTraces.get(id), { spanId: span.spanContext().spanId, traceparent: `00-${traceId}-${span.spanContext().spanId}-01` });

    await dev.applyTask("node-permanent", "node.permanent", { retry: { max_attempts: 3, backoff: "fixed", initial_interval_sec: 1, max_interval_sec: 1 } });
    const failed = await dev.fire("node-permanent");
    assert.equal((await dev.waitState(failed, ["FAILED", "SUCCEEDED"])).state, "FAILED");
    const fspan = await waitFor(`the span of instance ${failed}`, () => spans.getFinishedSpans().find((s) => s.attributes["ax.instance_id"] === failed));
    assert.deepEqual({ code: fspan.status.code, message: fspan.status.message, outcome: fspan.attributes["ax.outcome"], permanent: fspan.attributes["ax.permanent"] },
      { code: SpanStatusCode.ERROR, message: "the input can never work", outcome: "failed", permanent: true });
    assert.ok(fspan.events.some((e) => e.name === "exception"), "the failed attempt's span records no exception");
  });
});

describe("ctx.progress", () => {
  test("checks its arguments, saying what is wrong", async () => {
    for (const [done, total, message] of [[0, 0, ""], [3, 10, "three"], [10, 10, ""], [42, 0, "unknown total"], [1, 1, "é".repeat(128)]] as const) {
      assert.doesNotThrow(() => checkProgress(done, total, message));
    }
    for (const [done, total, message, want] of [
      [-1, 10, "", /must not be negative/], [1, -1, "", /must not be negative/], [11, 10, "", /done must not exceed total/],
      [1.5, 10, "", /must be integers/], ["1", 10, "", /must be integers/], [1, 2, "x".repeat(257), /of 257 bytes: at most 256 bytes/],
      [1, 2, "é".repeat(129), /of 258 bytes/], [1, 2, "\uD800", /not valid UTF-8/], [1, 2, 7, /must be a string/],
    ] as const) {
      assert.throws(() => checkProgress(done, total, message), want, `checkProgress(${done}, ${total}, ${String(message).slice(0, 10)})`);
    }
  });

  test("reports each step: the API's instance shows the latest", async () => {
    await dev.applyTask("node-progress", "node.progress");
    const id = await dev.fire("node-progress");
    for (let i = 1; i <= 3; i++) {
      const inst = await waitFor(`instance ${id} to show progress ${i} of 3`, async () => {
        const inst = await dev.instance(id);
        const p = inst.progress as { done?: number } | undefined;
        return p?.done === i ? inst : undefined;
      });
      assert.equal(inst.state, "RUNNING", JSON.stringify(inst));
      const p = inst.progress as { attempt: number; done: number; total: number; message: string; at: string };
      assert.deepEqual({ attempt: p.attempt, done: p.done, total: p.total, message: p.message }, { attempt: 1, done: i, total: 3, message: `step ${i} of 3` });
      assert.ok(Date.parse(p.at) >= Date.parse(inst.transitions.find((t) => t.to === "RUNNING")!.at) - 1000, JSON.stringify(inst));
      step(id);
    }
    const done = await dev.waitState(id, ["SUCCEEDED", "FAILED"]);
    assert.equal(done.state, "SUCCEEDED", JSON.stringify(done));
    assert.deepEqual(done.output, { steps: 3 });
    assert.deepEqual({ ...(done.progress as object), at: undefined }, { attempt: 1, done: 3, total: 3, message: "step 3 of 3", at: undefined }, "the last progress stays after the end");
  });

  test("on the wire: started first, a burst throttled to its latest value, at most one a second, none after the end", async () => {
    const t = new Topology();
    // Listen to the reports as ax dev's dispatcher user.
    const users = JSON.parse(readFileSync(path.join(dev.dir, "nats-users.json"), "utf8")) as Record<string, string>;
    const observer = await connect({ servers: dev.natsURL, user: "dispatcher", pass: users.dispatcher });
    const reports: Array<{ kind: string; progress?: { done: number; total: number; message?: string }; instance_id: number }> = [];
    observer.subscribe(t.prefix + ".report.>", { callback: (err, m) => {
      if (!err) reports.push(m.json());
    } });
    await observer.flush();
    try {
      await dev.applyTask("node-burst", "node.burst");
      const id = await dev.fire("node-burst");
      const mine = () => reports.filter((r) => r.instance_id === id);
      const progress = () => mine().filter((r) => r.kind === "progress").map((r) => r.progress!);
      const saw = (done: number) => waitFor(`a progress report of ${done} for instance ${id}`, () => progress().some((p) => p.done === done));

      await saw(1);
      assert.deepEqual(mine().map((r) => r.kind), ["started", "progress"], "the started report goes before the first progress");
      assert.deepEqual(progress(), [{ done: 1, total: 100, message: "first" }]);
      step(id);
      await saw(50);
      assert.deepEqual(progress().slice(1), [{ done: 50, total: 100, message: "burst" }], "49 calls in one turn of the event loop are one report of the last");
      step(id);
      await saw(90);
      const paced = progress().filter((p) => p.message === "paced");
      const ms = await waitFor("the handler to measure its paced calls", () => burst.get(id)?.pacedMs);
      // 40 calls over ms: a report a second at most, the last value last.
      assert.ok(paced.length >= 1 && paced.length <= Math.floor(ms / 1000) + 2, `${paced.length} reports of 40 calls over ${ms} ms: ${JSON.stringify(paced)}`);
      assert.equal(paced.at(-1)!.done, 90, "the latest value is sent at the end of the window");
      // Applied before the final report, not in one batch with it (after which a progress report is too late).
      await waitFor(`instance ${id} to show progress 90`, async () => ((await dev.instance(id)).progress as { done?: number } | undefined)?.done === 90);
      step(id);
      const done = await dev.waitState(id, ["SUCCEEDED", "FAILED"]);
      assert.equal(done.state, "SUCCEEDED", JSON.stringify(done));
      await waitFor("the final report on the wire", () => mine().some((r) => r.kind === "succeeded"));
      const kinds = mine().map((r) => r.kind);
      assert.equal(kinds.at(-1), "succeeded", `a report after the final one: ${kinds.join(", ")}`);
      assert.ok(!progress().some((p) => p.done === 99), "the value pending when the handler returned was dropped");
      assert.equal((done.progress as { done: number }).done, 90);
      const after = await waitFor("ctx.progress after the return to throw", () => burst.get(id)?.after);
      assert.match((after as Error).message, /the attempt has ended/);
    } finally {
      await observer.close();
    }
  });
});

describe("final reports", () => {
  test("those that end while another is published go in one report batch; each attempt is reported once", async () => {
    const t = new Topology();
    const users = JSON.parse(readFileSync(path.join(dev.dir, "nats-users.json"), "utf8")) as Record<string, string>;
    const observer = await connect({ servers: dev.natsURL, user: "dispatcher", pass: users.dispatcher });
    const singles: number[] = [];
    const batches: number[][] = [];
    observer.subscribe(t.prefix + ".report.default.node-test-main.>", { callback: (err, m) => {
      if (err) return;
      if (m.subject.endsWith(".batch")) {
        batches.push((m.json() as { reports: Array<{ instance_id: number; kind: string }> }).reports.map((r) => r.instance_id));
      } else {
        const r = m.json() as { instance_id: number; kind: string };
        if (r.kind === "succeeded") singles.push(r.instance_id);
      }
    } });
    await observer.flush();
    try {
      await dev.applyTask("node-finals", "node.wait");
      // As many attempts as the worker has slots, each held at its gate.
      const ids: number[] = [];
      for (let i = 0; i < 4; i++) ids.push(await dev.fire("node-finals"));
      await waitFor("the four attempts to wait at their gates", () => ids.every((id) => gates.has(id)));
      for (const id of ids) gates.get(id)!(); // all four return in one turn of the event loop
      for (const id of ids) assert.equal((await dev.waitState(id, ["SUCCEEDED", "FAILED"])).state, "SUCCEEDED");
      const reported = () => [...singles, ...batches.flat()].filter((id) => ids.includes(id)).sort((a, b) => a - b);
      await waitFor("the four final reports on the wire", () => reported().length >= ids.length);
      assert.deepEqual(reported(), [...ids].sort((a, b) => a - b), `each attempt's final report once: alone ${JSON.stringify(singles)}, in batches ${JSON.stringify(batches)}`);
      assert.ok(batches.some((b) => b.length >= 2), `the reports ready while the first was published went together: alone ${JSON.stringify(singles)}, in batches ${JSON.stringify(batches)}`);
    } finally {
      await observer.close();
    }
  });
});

describe("a Node worker leaving", () => {
  test("hands back an attempt that outlives its shutdown timeout: the next attempt runs elsewhere at once, no attempt spent", async () => {
    // One attempt only, and a backoff of 10 minutes: only a hand-back runs it again, and at once.
    await dev.applyTask("node-handback", "node.hold", { retry: { max_attempts: 1, backoff: "fixed", initial_interval_sec: 600, max_interval_sec: 600 } });
    const a = spawnWorker("node-test-handback", { AX_SHUTDOWN_MS: "1000" });
    await a.ready;
    const id = await dev.fire("node-handback");
    const inst = await dev.waitState(id, ["RUNNING"]);
    assert.equal(inst.worker_id, "node-test-handback");
    const b = spawnWorker("node-test-takes-over", { AX_HOLD: "0" });
    await b.ready;
    a.proc.kill("SIGTERM");
    assert.equal(await a.exited, 0, a.output());
    const done = await dev.waitState(id, ["SUCCEEDED", "FAILED"]);
    assert.equal(done.state, "SUCCEEDED", JSON.stringify(done));
    assert.equal(done.attempt, 2);
    assert.equal(done.max_attempts, 2, "a hand-back raises max_attempts by one");
    assert.equal(done.worker_id, "node-test-takes-over");
    const back = done.transitions.find((t) => t.to === "RETRYING" && t.attempt === 1);
    assert.ok(back, JSON.stringify(done.transitions));
    assert.match(String(back.reason), /^handed back: worker node-test-handback stopped and its shutdown timeout of 1s passed before the handler returned/);
    b.proc.kill("SIGTERM");
    assert.equal(await b.exited, 0, b.output());
  });
});

describe("a redelivered attempt", () => {
  test("asks the fence before its lease, and runs when the dispatcher says it never ran", async () => {
    const t = new Topology();
    // Listen to the fence questions as ax dev's dispatcher user (the executor may not).
    const users = JSON.parse(readFileSync(path.join(dev.dir, "nats-users.json"), "utf8")) as Record<string, string>;
    const observer = await connect({ servers: dev.natsURL, user: "dispatcher", pass: users.dispatcher });
    const questions: Array<{ subject: string; body: unknown }> = [];
    observer.subscribe(t.prefix + ".fence.>", { callback: (err, m) => {
      if (!err) questions.push({ subject: m.subject, body: m.json() });
    } });
    await observer.flush();
    try {
      // The queue's consumer, made as a worker would, then the attempt taken
      // once and given back without a lease: its next delivery is a redelivery.
      const cfg = t.poolConsumer("default", "normal", "node.fenced");
      const made = await nc.request(`$JS.API.CONSUMER.CREATE.${t.dispatchStream}.${cfg.durable_name}.${cfg.filter_subject}`,
        JSON.stringify({ stream_name: t.dispatchStream, config: cfg, action: "create" }));
      assert.ok(!made.json<{ error?: unknown }>().error, made.string());
      await dev.applyTask("node-fenced", "node.fenced", { retry: { max_attempts: 1, backoff: "fixed", initial_interval_sec: 1, max_interval_sec: 1 } });
      const id = await dev.fire("node-fenced");
      const inbox = createInbox(inboxPrefix("executor-node-test-main"));
      const first = await waitFor("the first delivery", async () => {
        const got = await new Promise<Msg | undefined>((resolve) => {
          const sub = nc.subscribe(inbox, { max: 1, callback: (_e, m) => resolve(m.headers?.code ? undefined : m) });
          setTimeout(() => {
            sub.unsubscribe();
            resolve(undefined);
          }, 2000);
          nc.publish(`$JS.API.CONSUMER.MSG.NEXT.${t.dispatchStream}.${cfg.durable_name}`, JSON.stringify({ batch: 1, no_wait: true }), { reply: inbox });
        });
        return got;
      });
      assert.equal(first.json<{ instance_id: number }>().instance_id, id);
      first.respond("-NAK");
      const w = spawnWorker("node-test-fenced");
      await w.ready;
      const done = await dev.waitState(id, ["SUCCEEDED", "FAILED"]);
      assert.equal(done.state, "SUCCEEDED", JSON.stringify(done));
      assert.deepEqual(done.output, { worker: "node-test-fenced", attempt: 1 });
      const q = questions.find((x) => x.subject === t.fence("default", "node-test-fenced", id));
      assert.ok(q, `no fence question on ${t.fence("default", "node-test-fenced", id)}: ${JSON.stringify(questions)}`);
      assert.deepEqual(q.body, { instance_id: id, attempt: 1, worker_id: "node-test-fenced" });
      w.proc.kill("SIGTERM");
      assert.equal(await w.exited, 0, w.output());
    } finally {
      await observer.close();
    }
  });
});

describe("the example worker (examples/node)", () => {
  test("reports progress from its count task, and passes ax conformance executor, the drain included", async () => {
    // examples/node depends on this package by path (file:../../sdk/node):
    // link it as npm install would, so that the example runs as shipped.
    const example = fileURLToPath(new URL("../../../../examples/node/", import.meta.url));
    const link = path.join(example, "node_modules", "@ax-scheduler", "executor");
    if (!existsSync(link)) {
      mkdirSync(path.dirname(link), { recursive: true });
      symlinkSync(path.relative(path.dirname(link), fileURLToPath(new URL("../../", import.meta.url))), link, "dir");
    }
    dev.workerCredentials("node-example", ["node.greet", "node.count", "conformance.echo", "conformance.fail", "conformance.permanent", "conformance.sleep", "conformance.log"]);
    const w = spawn(process.execPath, [path.join(example, "worker.mjs")], {
      env: { ...process.env, AX_DEV_DATA: dev.dir, NATS_URL: dev.natsURL, AX_WORKER_ID: "node-example" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    children.push(w);
    let wout = "";
    w.stdout!.on("data", (b: Buffer) => (wout += b.toString()));
    w.stderr!.on("data", (b: Buffer) => (wout += b.toString()));
    await waitFor("the example worker to start", (): boolean => {
      if (w.exitCode !== null) throw new Error("the example worker exited: " + wout);
      return wout.includes("SIGTERM or Ctrl-C drains it");
    });
    // Its progress example, applied from its task file as the README says.
    const apply = spawnSync(process.env.AX_BIN!, ["task", "apply", "-f", path.join(example, "count.yaml"), "--api", dev.apiURL],
      { env: { ...process.env, AX_TOKEN: dev.token }, encoding: "utf8" });
    assert.equal(apply.status, 0, `ax task apply -f examples/node/count.yaml: ${apply.stdout}${apply.stderr}`);
    const countID = await dev.fire("count", { to: 10, step_ms: 500 });
    const midway = await waitFor(`count instance ${countID} to show its progress while it runs`, async () => {
      const inst = await dev.instance(countID);
      return inst.progress && inst.state === "RUNNING" ? inst : undefined;
    });
    const p = midway.progress as { done: number; total: number; message: string };
    assert.ok(p.total === 10 && p.done >= 1 && p.done <= 10 && p.message === `counted to ${p.done}`, JSON.stringify(midway));
    const counted = await dev.waitState(countID, ["SUCCEEDED", "FAILED"]);
    assert.equal(counted.state, "SUCCEEDED", JSON.stringify(counted));
    assert.deepEqual(counted.output, { counted: 10 });
    const kit = spawn(process.env.AX_BIN!, ["conformance", "executor", "--pool", "default", "--ax-dev", dev.dir, "--nats-url", dev.natsURL,
      "--api", dev.apiURL, "--worker-pid", String(w.pid)], { env: { ...process.env, AX_TOKEN: dev.token }, stdio: ["ignore", "pipe", "pipe"] });
    let kout = "";
    kit.stdout!.on("data", (b: Buffer) => (kout += b.toString()));
    kit.stderr!.on("data", (b: Buffer) => (kout += b.toString()));
    const code = await new Promise<number | null>((r) => kit.once("exit", (c) => r(c)));
    assert.equal(code, 0, `ax conformance executor exited ${code}:\n${kout}\nthe worker's log:\n${wout}`);
    assert.match(kout, /drain/);
    assert.doesNotMatch(kout, /not checked/, kout);
  });
});
