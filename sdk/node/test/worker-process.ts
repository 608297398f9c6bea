// A worker in a process of its own, for the tests that kill it (kill -9)
// or stop it (SIGTERM). It connects with the NATS CLI's environment
// (NATS_URL, NATS_USER, NATS_PASSWORD), takes its id from AX_WORKER_ID
// and its shutdown timeout from AX_SHUTDOWN_MS (default 20000), and prints
// "ready" once it pulls work.
//
// Handlers:
//   node.hold   runs until its signal aborts, unless AX_HOLD is "0" (then it returns at once)
//   node.slow   returns {slept_ms} after AX_SLOW_MS (default 2000), ignoring nothing
//   node.fenced returns {worker, attempt} at once

import { connectExecutor, Worker } from "../src/index.js";

const nc = await connectExecutor();
const worker = new Worker({ connection: nc, workerId: process.env.AX_WORKER_ID, shutdownTimeoutMs: Number(process.env.AX_SHUTDOWN_MS ?? 20_000) });
worker.handle("node.hold", async (ctx) => {
  ctx.logger.info("holding", { worker: ctx.workerId });
  if (process.env.AX_HOLD === "0") return { worker: ctx.workerId };
  await new Promise((_, reject) => ctx.signal.addEventListener("abort", () => reject(ctx.signal.reason), { once: true }));
});
worker.handle("node.slow", async (ctx) => {
  const ms = Number(process.env.AX_SLOW_MS ?? 2000);
  await new Promise((r) => setTimeout(r, ms));
  return { slept_ms: ms, worker: ctx.workerId };
});
worker.handle("node.fenced", async (ctx) => ({ worker: ctx.workerId, attempt: ctx.attempt }));
worker.handleSignals();
const running = worker.run();
await worker.ready();
process.stdout.write("ready\n");
await running;
await nc.close();
