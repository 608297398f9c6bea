// The worker written from docs/executor-protocol.md alone
// (test/fromdoc-worker.mjs, the raw NATS packages and no AX SDK) against a
// real ax dev: it must pass `ax conformance executor`, the drain included —
// the proof that the document is enough to write a worker (issue #14).

import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";

import { Dev, waitFor } from "./harness.js";

const dev = new Dev();
const children: ChildProcess[] = [];

before(async () => {
  await dev.start();
});

after(async () => {
  for (const c of children) if (c.exitCode === null) c.kill("SIGKILL");
  await dev.stop();
});

describe("the worker written from the protocol document (test/fromdoc-worker.mjs)", () => {
  test("passes ax conformance executor, the drain included", async () => {
    // compiled to dist/test: the worker stays in test/, next to node_modules' parent
    const file = fileURLToPath(new URL("../../test/fromdoc-worker.mjs", import.meta.url));
    dev.workerCredentials("fromdoc-1", ["conformance.echo", "conformance.fail", "conformance.permanent", "conformance.sleep", "conformance.log"]);
    const w = spawn(process.execPath, [file], {
      env: { ...process.env, AX_DEV_DATA: dev.dir, NATS_URL: dev.natsURL, AX_WORKER_ID: "fromdoc-1" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    children.push(w);
    let wout = "";
    w.stdout!.on("data", (b: Buffer) => (wout += b.toString()));
    w.stderr!.on("data", (b: Buffer) => (wout += b.toString()));
    await waitFor("the worker written from the document to start", (): boolean => {
      if (w.exitCode !== null) throw new Error("the worker exited: " + wout);
      return wout.includes("SIGTERM drains it");
    });
    const kit = spawn(process.env.AX_BIN!, ["conformance", "executor", "--pool", "default", "--ax-dev", dev.dir, "--nats-url", dev.natsURL,
      "--api", dev.apiURL, "--worker-pid", String(w.pid)], { env: { ...process.env, AX_TOKEN: dev.token }, stdio: ["ignore", "pipe", "pipe"] });
    let kout = "";
    kit.stdout!.on("data", (b: Buffer) => (kout += b.toString()));
    kit.stderr!.on("data", (b: Buffer) => (kout += b.toString()));
    const code = await new Promise<number | null>((r) => kit.once("exit", (c) => r(c)));
    assert.equal(code, 0, `ax conformance executor exited ${code}:\n${kout}\nthe worker's log:\n${wout}`);
    assert.match(kout, /PASS: every check passed/);
    assert.doesNotMatch(kout, /not checked/, kout);
    // the drain ended the worker: it exits 0 after deleting its record
    const exit = w.exitCode ?? (await new Promise<number | null>((r) => w.once("exit", (c) => r(c))));
    assert.equal(exit, 0, `the worker exited ${exit} after the drain:\n${wout}`);
  });
});
