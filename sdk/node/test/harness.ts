// The tests' AX: a real `ax dev` (the binary in $AX_BIN, built by
// node_test.go) on free loopback ports, with its own data folder and
// private PostgreSQL, and helpers to drive it through its HTTP API.

import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { chmodSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";

import { devExecutorCredentials } from "../src/index.js";

/**
 * waitFor polls cond until it returns a value other than undefined or
 * false, and fails after timeoutMs naming what it waited for. An error
 * cond throws fails it at once.
 */
export async function waitFor<T>(what: string, cond: () => Promise<T | undefined | false> | T | undefined | false, timeoutMs = 60_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await cond();
    if (v !== undefined && v !== false) return v as T;
    if (Date.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const port = (srv.address() as net.AddressInfo).port;
      srv.close(() => resolve(port));
    });
  });
}

export interface Instance {
  id: number;
  task: string;
  state: string;
  attempt: number;
  max_attempts: number;
  worker_id: string;
  output?: unknown;
  error?: string;
  transitions: Array<{ from: string; to: string; attempt: number; operator: string; reason?: string; at: string }>;
  [field: string]: unknown;
}

/** Dev is one running ax dev. */
export class Dev {
  natsURL = "";
  apiURL = "";
  token = "";
  readonly dir = mkdtempSync(path.join(os.tmpdir(), "ax-node-sdk-"));
  private proc?: ChildProcess;
  private output = "";

  /** start runs ax dev and waits until it says it is running. */
  async start(leaseTTL = "3s"): Promise<void> {
    // ax dev's private PostgreSQL may run as another user, who must reach the folder.
    chmodSync(this.dir, 0o755);
    const bin = process.env.AX_BIN;
    if (!bin) throw new Error("AX_BIN is not set: run these tests through `go test ./sdk/node` (it builds ax), or set AX_BIN to an ax binary built with `go build -o /tmp/ax ./cmd/ax`");
    const natsPort = await freePort();
    const httpPort = await freePort();
    this.natsURL = `nats://127.0.0.1:${natsPort}`;
    this.apiURL = `http://127.0.0.1:${httpPort}`;
    const env = { ...process.env };
    delete env.DATABASE_URL;
    this.proc = spawn(bin, ["dev", "--data", this.dir, "--http", `127.0.0.1:${httpPort}`, "--nats", `127.0.0.1:${natsPort}`,
      "--nats-monitor", "off", "--metrics-addr", "", "--lease-ttl", leaseTTL, "--log-level", "warn"], { env, stdio: ["ignore", "pipe", "pipe"] });
    this.proc.stdout!.on("data", (b: Buffer) => (this.output += b.toString()));
    this.proc.stderr!.on("data", (b: Buffer) => (this.output += b.toString()));
    let exited = false;
    this.proc.once("exit", () => (exited = true));
    await waitFor("ax dev to start", () => {
      if (exited) throw new Error("ax dev exited:\n" + this.output);
      return this.output.includes("AX is running");
    }, 120_000);
    this.token = readFileSync(path.join(this.dir, "admin.token"), "utf8").trim();
  }

  /** What ax dev printed so far, for failure messages. */
  get log(): string {
    return this.output;
  }

  /**
   * workerCredentials adds the NATS user of worker workerId of pool default,
   * serving handlers, to the running ax dev (ax user add executor --ax-dev)
   * and returns its credentials: every executor user of ax dev is one
   * worker's, for the handlers it names.
   */
  workerCredentials(workerId: string, handlers: string[]) {
    execFileSync(process.env.AX_BIN!, ["user", "add", "executor", "--ax-dev", this.dir, "--pool", "default", "--worker", workerId,
      ...handlers.flatMap((h) => ["--handler", h])], { encoding: "utf8" });
    return { servers: this.natsURL, ...devExecutorCredentials(this.dir, workerId) };
  }

  async stop(): Promise<void> {
    const p = this.proc;
    if (p && p.exitCode === null) {
      const exited = new Promise((r) => p.once("exit", r));
      p.kill("SIGTERM");
      await Promise.race([exited, new Promise((r) => setTimeout(r, 30_000))]);
      if (p.exitCode === null) p.kill("SIGKILL");
    }
    rmSync(this.dir, { recursive: true, force: true });
  }

  async api<T>(method: string, p: string, body?: unknown, headers: Record<string, string> = {}): Promise<T> {
    const res = await fetch(this.apiURL + p, {
      method,
      headers: { authorization: "Bearer " + this.token, "content-type": "application/json", ...headers },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    if (!res.ok) throw new Error(`${method} ${p}: ${res.status} ${text}`);
    return JSON.parse(text) as T;
  }

  /** applyTask applies a task running handler with the given execution settings. */
  async applyTask(name: string, handler: string, execution: Record<string, unknown> = {}): Promise<void> {
    await this.api("POST", "/v1/tasks", {
      task_name: name, owner: "node-sdk-test", description: "a task of the Node SDK's tests",
      triggers: [{ type: "manual" }],
      execution: { handler, timeout: "30s", retry: { max_attempts: 1, backoff: "fixed", initial_interval_sec: 1, max_interval_sec: 1 }, ...execution },
    });
  }

  /** fire fires task with payload (and the request's headers) and returns the instance's id. */
  async fire(task: string, payload?: unknown, headers: Record<string, string> = {}): Promise<number> {
    const r = await this.api<{ instance_id: number }>("POST", `/v1/tasks/${task}/runs`, payload === undefined ? {} : { payload }, headers);
    return r.instance_id;
  }

  instance(id: number): Promise<Instance> {
    return this.api<Instance>("GET", `/v1/instances/${id}`);
  }

  /** waitState waits until instance id is in one of states, and returns it. */
  async waitState(id: number, states: string[], timeoutMs = 60_000): Promise<Instance> {
    let last: Instance | undefined;
    try {
      return await waitFor(`instance ${id} to be ${states.join(" or ")}`, async () => {
        last = await this.instance(id);
        return states.includes(last.state) ? last : undefined;
      }, timeoutMs);
    } catch (err) {
      throw new Error(`${(err as Error).message}; it is ${JSON.stringify(last)}`);
    }
  }
}
