// An AX executor in Node.js, on @ax-scheduler/executor (sdk/node).
//
// It serves the pools in AX_POOLS (default "default") with:
//   node.greet      the example: greets {"name": ...}, logging to the task log
//   node.count      counts to {"to": n} (default 10), a step each {"step_ms": ms}
//                   (default 500), reporting its progress (ax fire --wait draws it)
//   conformance.*   the handlers `ax conformance executor` fires at a worker
//                   (docs/executor-protocol.md, "Conformance handlers")
//
// Connection: AX_DEV_DATA=<ax dev's --data folder> reads the user of its
// worker id (AX_WORKER_ID, default node-1) that ax user add executor
// --ax-dev made there (README.md); otherwise the NATS CLI's
// NATS_URL, NATS_USER, NATS_PASSWORD (or NATS_CREDS). README.md says how
// to run it against `make dev`.

import { connectExecutor, devExecutorCredentials, PermanentError, Worker } from "@ax-scheduler/executor";

const dev = process.env.AX_DEV_DATA;
const workerId = process.env.AX_WORKER_ID || (dev ? "node-1" : undefined);
const nc = await connectExecutor(dev ? devExecutorCredentials(dev, workerId) : {});
const worker = new Worker({
  connection: nc,
  workerId,
  pools: process.env.AX_POOLS ? process.env.AX_POOLS.split(",") : undefined,
  slots: Number(process.env.AX_SLOTS || 0),
});

worker.handle("node.greet", async (ctx, payload) => {
  ctx.logger.info("greeting", { name: payload.name, attempt: ctx.attempt });
  return { greeting: `hello, ${payload.name}`, worker: ctx.workerId };
}, {
  parse: (raw) => {
    if (typeof raw?.name !== "string" || raw.name === "") throw new Error('want {"name": "<a non-empty string>"}');
    return { name: raw.name };
  },
});

// sleep waits ms, or rejects with the signal's reason once it aborts.
const sleep = (ms, signal) => new Promise((resolve, reject) => {
  const timer = setTimeout(resolve, ms);
  signal.addEventListener("abort", () => {
    clearTimeout(timer);
    reject(signal.reason);
  }, { once: true });
});

worker.handle("node.count", async (ctx, { to, stepMs }) => {
  for (let i = 1; i <= to; i++) {
    await sleep(stepMs, ctx.signal);
    // Never waits for the network: the worker sends the latest value at most once a second.
    ctx.progress(i, to, `counted to ${i}`);
  }
  return { counted: to };
}, {
  parse: (raw) => {
    const to = raw?.to ?? 10;
    const stepMs = raw?.step_ms ?? 500;
    if (!Number.isSafeInteger(to) || to < 1) throw new Error('want {"to": <a positive integer>}');
    if (!Number.isSafeInteger(stepMs) || stepMs < 0) throw new Error('want {"step_ms": <milliseconds, 0 or more>}');
    return { to, stepMs };
  },
});

// The conformance handlers: exactly what the kit expects of them.
const object = (raw) => (raw !== null && typeof raw === "object" && !Array.isArray(raw) ? raw : {});

worker.handle("conformance.echo", async (ctx) => ctx.payload);

worker.handle("conformance.fail", async (ctx) => {
  const failures = object(ctx.payload).failures ?? 2;
  if (ctx.attempt <= failures) throw new Error(`conformance: attempt ${ctx.attempt} fails on purpose`);
  return { attempt: ctx.attempt };
});

worker.handle("conformance.permanent", async () => {
  throw new PermanentError("conformance: permanent failure");
});

worker.handle("conformance.sleep", async (ctx) => {
  const ms = object(ctx.payload).ms ?? 1000;
  await sleep(ms, ctx.signal);
  return { slept_ms: ms };
});

worker.handle("conformance.log", async (ctx) => {
  const lines = object(ctx.payload).lines ?? 3;
  for (let i = 1; i <= lines; i++) ctx.logger.info(`conformance line ${i} of ${lines}`, { i });
  return { lines };
});

worker.handleSignals();
const running = worker.run();
await worker.ready();
console.error(`worker ${worker.workerId} serves ${worker.pools.join(", ")} with ${worker.handlerNames.join(", ")}; SIGTERM or Ctrl-C drains it`);
await running;
await nc.close();
