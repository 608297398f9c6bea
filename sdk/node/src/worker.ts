// The worker: an AX executor in Node.js. It does what the Go executor
// (executor/*.go) does, in the same order and with the same messages; the
// comments name the Go file each part follows. docs/node-sdk.md is the guide.

import { randomBytes } from "node:crypto";
import os from "node:os";

import { createInbox, headers, nuid, type Msg, type NatsConnection, type Subscription } from "@nats-io/transport-node";
import { jetstream, jetstreamManager, JetStreamApiError, type JetStreamClient, type JetStreamManager } from "@nats-io/jetstream";
import { Kvm, type KV } from "@nats-io/kv";
import { context as otelContext } from "@opentelemetry/api";

import { CancelledError, goDuration, isPermanent, LeaseLostError, PermanentError, retryAfter, ShutdownError, TimeoutError } from "./errors.js";
import { LogShipper } from "./logs.js";
import { checkProgress, decodeDispatch, EXECUTOR_PROTOCOL, type Control, type Dispatch, type FenceAnswer, type Parent, type Progress, type Report, type ReportKind, type WorkerRecord } from "./schemas.js";
import { endRun, startRun, traceparentOf, type DispatchTrace, type RunSpan } from "./trace.js";
import { DEFAULT_POOL, leaseKey, PRIORITIES, Topology, WORKER_POOL, type ConsumerSettings } from "./topology.js";

/** The version a worker states in ax-workers unless told another. */
export const DEFAULT_VERSION = "0.1.0";

// Timings the Go executor uses (executor/service.go, admit.go, lease.go).
const OP_TIMEOUT_MS = 10_000; // one request to the server
const ABANDON_AFTER_MS = 10_000; // a handler that ignores its signal's abort
const UNREGISTERED_DELAY_MS = 30_000; // work pinned here for a handler it lacks, or of a later protocol
const FENCE_TIMEOUT_MS = 5_000; // the wait for a dispatcher's answer to a fence question
const LOW_FIRST_EVERY = 5; // every fifth round that takes work drains lowest priority first
const REPORT_HEADROOM = 4 << 10; // room for a report's headers under the max payload
const PUBLISH_BACKOFF_MS = [100, 300, 1000]; // between the tries of a report; the last repeats
const RECONNECT_WINDOW_MS = 10_000; // the least time after a reconnection during which every delivery asks the fence
const REPORT_TRY_MS = 2000; // how long one try of a report awaits its acknowledgement
const REPORT_PATIENCE_MS = 30_000; // how long a report is tried (executor/lease.go)
const MAX_BATCH_REPORTS = 1000; // the final reports of one report batch, at most

/**
 * The least time between two progress reports of one attempt, in ms
 * (executor.ProgressInterval): ctx.progress keeps the latest value and
 * sends it when this much has passed since the last report.
 */
export const PROGRESS_INTERVAL_MS = 1000;

// JetStream API error codes.
const ERR_WRONG_LAST_SEQUENCE = 10071;
const ERR_CONSUMER_EXISTS = 10148;
const ERR_CONSUMER_NAME_EXISTS = 10013;

const workerIDRE = /^[A-Za-z0-9_-]{1,128}$/;

/** The levels of a logger. */
export type Level = "debug" | "info" | "warn" | "error";

/** Logger is what a worker writes its own lines to, and what a handler gets as ctx.logger. */
export interface Logger {
  debug(message: string, fields?: Record<string, unknown>): void;
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}

const levelRank: Record<Level, number> = { debug: 0, info: 1, warn: 2, error: 3 };

/** jsonLogger writes JSON lines to stderr from level up: the default worker log. */
export function jsonLogger(level: Level = "info", base: Record<string, unknown> = {}): Logger {
  const write = (l: Level) => (message: string, fields?: Record<string, unknown>) => {
    if (levelRank[l] < levelRank[level]) return;
    process.stderr.write(JSON.stringify({ level: l, time: new Date().toISOString(), ...base, ...fields, message }) + "\n");
  };
  return { debug: write("debug"), info: write("info"), warn: write("warn"), error: write("error") };
}

/** Context is what a handler gets about its attempt, beside the payload. */
export interface Context {
  /** The instance's id. */
  readonly instanceId: number;
  /** The task's name. */
  readonly task: string;
  /** The attempt's number, the first being 1. */
  readonly attempt: number;
  /** How many attempts the instance may have in all. */
  readonly maxAttempts: number;
  /** The firing's event id. */
  readonly eventId: string;
  /** The instance's priority: urgent, normal or low. */
  readonly priority: string;
  /** When the trigger fired. */
  readonly firedAt: Date;
  /** When the attempt times out: the signal aborts then with a TimeoutError. */
  readonly deadline: Date;
  /**
   * Aborts when the attempt must stop: at its deadline (TimeoutError), on
   * a cancel (CancelledError), when its lease was lost (LeaseLostError) or
   * when the worker stops and its grace has passed (ShutdownError); the
   * reason is signal.reason. Pass it to fetch and timers, or check it.
   */
  readonly signal: AbortSignal;
  /** Ships each line to AX_LOGS (the instance's task log, `ax logs <id>`), and copies it to the worker's log. */
  readonly logger: Logger;
  /** The worker's id. */
  readonly workerId: string;
  /** The payload as it came, any JSON value (undefined when there is none). */
  readonly payload: unknown;
  /** The run the instance belongs to, shared by every task chained after its root firing. */
  readonly runId?: string;
  /** The results of the parent instances, by task name, for a chained task. */
  readonly parents?: Readonly<Record<string, Parent>>;
  /** The shard this instance runs, from 0, for a sharded or broadcast firing. */
  readonly shardIndex?: number;
  /** How many shards the firing fans out into. */
  readonly shardCount?: number;
  /** The dispatch message as it came. */
  readonly dispatch: Readonly<Dispatch>;
  /**
   * The W3C traceparent of the attempt's span, ax.executor.run: a child of
   * the dispatcher's span that routed the attempt (the dispatch message's
   * traceparent header), made by the OpenTelemetry tracer provider the
   * application registered; with none, the dispatch message's traceparent
   * itself. Undefined when the dispatch message carried none and no
   * provider is registered. The handler runs in the span's OpenTelemetry
   * context, so its own spans are the span's children; the final report
   * carries it back.
   */
  readonly traceparent?: string;
  /**
   * The attempt's fencing token: the revision at which the worker created
   * the attempt's lease in ax-leases, greater for every later attempt of
   * the instance and for every later holder of its mutex key. Send it with
   * each write (the AX-Fence header, or a fence column written with
   * `WHERE fence <= $token`) so that the store refuses the writes of an
   * attempt AX has moved on from. See docs/protocol.md, "Fencing token".
   */
  readonly fence: number;
  /**
   * progress reports how far the attempt has got: done units of total (0
   * when the total is unknown), with a short message (at most 256 bytes
   * of UTF-8). The dispatcher keeps the latest on the instance, where the
   * API, `ax instance get`, `ax fire --wait` and the console show it.
   *
   * It keeps the value and returns at once, never waiting for the
   * network: the worker sends at most one progress report per attempt per
   * PROGRESS_INTERVAL_MS, always the latest value. The first call sends
   * the attempt's started report at once (not after startedDelayMs), and
   * the progress after it. A value not yet sent when the handler returns
   * is dropped: the final report follows.
   *
   * It throws for values out of range (not integers, negative, done >
   * total > 0, a message too long or with a lone surrogate), once the
   * signal has aborted, and once the handler has returned. A report that
   * fails to publish is logged, not thrown; the next value is sent anyway.
   */
  progress(done: number, total?: number, message?: string): void;
}

/** A Handler runs one attempt: its result is the output, a thrown error the failure. */
export type Handler<P = unknown, O = unknown> = (ctx: Context, payload: P) => Promise<O> | O;

/** HandlerOptions tune one handler. */
export interface HandlerOptions<P> {
  /**
   * parse turns the payload (any JSON value, undefined when absent) into a
   * P, throwing when it does not fit: the attempt then fails permanently,
   * saying so. Default: the payload as it is, unchecked.
   */
  parse?: (payload: unknown) => P;
  /** The most attempts of this handler the worker runs at once (default: no limit but the slots). */
  concurrency?: number;
}

interface Entry {
  run: Handler<unknown, unknown>;
  parse?: (payload: unknown) => unknown;
  concurrency: number;
  busy: number;
}

/** WorkerOptions configure a worker. Durations are in milliseconds. */
export interface WorkerOptions {
  /** The NATS connection, made with the executor user's credentials and inbox prefix (see connectExecutor). Required. */
  connection: NatsConnection;
  /** The worker's id: 1-128 letters, digits, '-' or '_' (default "<hostname>-<6 random characters>"). */
  workerId?: string;
  /** The pools it serves (default ["default"]): a pool is a task's tags sorted and joined with '+'. */
  pools?: string[];
  /** How many attempts it runs at once (default 16). */
  slots?: number;
  /** The version it states in ax-workers, for min_worker_version (default "0.1.0"). */
  version?: string;
  /** The subject prefix of the installation (default "ax"). */
  prefix?: string;
  /** How often it puts its record in ax-workers (default 5000). Must be shorter than the bucket's TTL. */
  heartbeatIntervalMs?: number;
  /** How long it waits for a doorbell before it looks at its queues again (default 1000). */
  idleWaitMs?: number;
  /** How long running attempts may go on after stop() before they are cancelled (default 30000). */
  shutdownTimeoutMs?: number;
  /** How long an attempt runs before its started report is sent (default 1000); negative: before the handler runs. */
  startedDelayMs?: number;
  /** How long an attempt that cannot start yet (its handler's slots are full) is given back for (default 1000). */
  requeueDelayMs?: number;
  /** How many task log lines may wait to be shipped (default 10000). */
  logBuffer?: number;
  /** How often waiting task log lines are shipped (default 100). */
  logFlushIntervalMs?: number;
  /** The worker's own log (default: JSON lines on stderr from info up). */
  logger?: Logger;
  /**
   * Send every final report alone, on its attempt's own subject (default
   * false: when the dispatch message says the dispatchers take report
   * batches, the final reports that end while another is being published go
   * together in one message on ax.report.<pool>.<worker_id>.batch).
   */
  singleReports?: boolean;
}

/** A final report waiting for the sender (executor/finals.go queuedFinal). */
interface QueuedFinal {
  d: Dispatch;
  kind: ReportKind;
  data: string; // the report, encoded
  resolve: () => void;
  reject: (err: Error) => void;
}

/** An attempt running on the worker (executor/attempt.go's attempt). */
interface Attempt {
  d: Dispatch;
  key: string;
  lease: string;
  revision: number;
  fence: number; // the lease create's revision: the fencing token
  entry: Entry;
  startedAt: Date;
  deadline: Date;
  run: RunSpan; // its span, ax.executor.run (trace.ts)
  controller: AbortController;
  timer: NodeJS.Timeout;
  log: Logger;
  started: "pending" | "sending" | "done";
  startedSent?: Promise<void>;
  startedTimer?: NodeJS.Timeout;
  progress?: ProgressState;
}

/** An attempt's progress reporting (executor/progress.go progressState), made on its first ctx.progress. */
interface ProgressState {
  latest?: { p: Progress; at: Date }; // the value not sent yet
  started: Promise<void>; // the attempt's started report, sent at once
  timer?: NodeJS.Timeout; // the next send, when one is due
  sending: boolean;
  last: number; // when the last report was sent (Date.now()), 0 before the first
  closed: boolean; // the handler returned: nothing more is sent
}


/** A queue is one consumer the worker pulls (executor/pull.go's queue). */
interface Queue {
  pool: string;
  priority: string;
  handler: string; // "" for the worker's own queue
  subject: string;
  consumer: string;
  rung: number;
  seen: number;
  more: boolean;
}

/** A fetched dispatch message. */
interface Delivered {
  msg: Msg;
  delivered: number; // how many times JetStream delivered it, from 1
}

/**
 * Worker is one AX executor. Register handlers with handle(), then call
 * run(): it resolves once the worker has stopped (stop(), SIGTERM with
 * handleSignals(), or the connection closing).
 */
export class Worker {
  readonly workerId: string;
  readonly pools: readonly string[];
  readonly slots: number;
  private readonly nc: NatsConnection;
  private readonly topology: Topology;
  private readonly version: string;
  private readonly heartbeatMs: number;
  private readonly idleWaitMs: number;
  private readonly shutdownMs: number;
  private readonly startedDelayMs: number;
  private readonly requeueDelayMs: number;
  private readonly logBuffer: number;
  private readonly logFlushMs: number;
  private readonly singleReports: boolean;
  private readonly log: Logger;
  private readonly nonce = nuid.next();
  private readonly hostname = os.hostname();
  private readonly handlers = new Map<string, Entry>();

  private js!: JetStreamClient;
  private jsm!: JetStreamManager;
  private leases!: KV;
  private workers!: KV;
  private logs!: LogShipper;
  private leaseTTLMs = 0;
  private own!: Queue;
  private queues: Queue[] = [];
  private byRing = new Map<string, Queue>();
  private subs: Subscription[] = [];
  private control?: Subscription;
  private fetchSub?: Subscription;
  private fetchInbox = "";
  private fetchSeq = 0;
  private fetching?: { inbox: string; on: (m: Msg) => void };
  private running = new Map<string, Attempt>();
  private reporting = new Set<Promise<void>>();
  private reconnectedAt = 0; // Date.now() of the connection's last reconnection, 0 before any
  private finalQueue: QueuedFinal[] = [];
  // The subject and trace headers of each admitted dispatch message.
  private traces = new WeakMap<Dispatch, DispatchTrace>();
  private sendingFinals = false;
  private batchSeq = 0;
  private held = 0;
  private startedAt = new Date();
  private lastSweep = 0;
  private state: "new" | "running" | "stopping" | "stopped" = "new";
  private wake?: () => void;
  private stopRequested?: () => void;
  private stopped: Promise<void>;
  private resolveStopped!: () => void;
  private readyPromise: Promise<void>;
  private resolveReady!: () => void;
  private background: NodeJS.Timeout[] = [];

  constructor(opts: WorkerOptions) {
    if (!opts || !opts.connection) throw new Error("ax worker options: connection is required (see connectExecutor)");
    this.nc = opts.connection;
    this.topology = new Topology(opts.prefix ?? "");
    this.workerId = opts.workerId ?? defaultWorkerID();
    if (!workerIDRE.test(this.workerId)) {
      throw new Error(`ax worker options: worker id "${this.workerId}": use 1-128 letters, digits, '-' or '_' (it becomes a NATS subject token and a KV key)`);
    }
    const pools = opts.pools && opts.pools.length > 0 ? [...opts.pools] : [DEFAULT_POOL];
    const seen = new Set<string>();
    for (const p of pools) {
      if (p === "" || /[.*>/\\ \t\r\n]/.test(p)) {
        throw new Error(`ax worker options: pool "${p}": a pool is the task tags sorted and joined with '+', without '.', '*', '>', slashes or spaces`);
      }
      if (p === WORKER_POOL) throw new Error(`ax worker options: pool "${p}" is reserved for the subjects that address one worker; choose another pool`);
      if (seen.has(p)) throw new Error(`ax worker options: pool "${p}" is listed twice`);
      seen.add(p);
    }
    this.pools = pools;
    this.slots = positive("slots", opts.slots, 16);
    this.version = opts.version || DEFAULT_VERSION;
    this.heartbeatMs = positive("heartbeatIntervalMs", opts.heartbeatIntervalMs, 5000);
    this.idleWaitMs = positive("idleWaitMs", opts.idleWaitMs, 1000);
    this.shutdownMs = positive("shutdownTimeoutMs", opts.shutdownTimeoutMs, 30_000);
    this.requeueDelayMs = positive("requeueDelayMs", opts.requeueDelayMs, 1000);
    this.logBuffer = positive("logBuffer", opts.logBuffer, 10_000);
    this.logFlushMs = positive("logFlushIntervalMs", opts.logFlushIntervalMs, 100);
    this.singleReports = opts.singleReports ?? false;
    this.startedDelayMs = opts.startedDelayMs === undefined || opts.startedDelayMs === 0 ? 1000 : opts.startedDelayMs;
    this.log = opts.logger ?? jsonLogger("info", { service: "executor", worker_id: this.workerId });
    this.stopped = new Promise((resolve) => (this.resolveStopped = resolve));
    this.readyPromise = new Promise((resolve) => (this.resolveReady = resolve));
  }

  /**
   * handle registers fn for the handler called name (a task's
   * execution.handler). It throws on a bad name, a name registered twice,
   * or after run().
   */
  handle<P = unknown, O = unknown>(name: string, fn: Handler<P, O>, opts: HandlerOptions<P> = {}): this {
    if (this.state !== "new") throw new Error(`ax worker: handle("${name}") after run(): register every handler first`);
    if (!/^[A-Za-z0-9._-]{1,128}$/.test(name)) throw new Error(`ax worker: handler name "${name}": use 1-128 letters, digits, '.', '_' or '-'`);
    if (this.handlers.has(name)) throw new Error(`ax worker: handler "${name}" is registered twice`);
    if (typeof fn !== "function") throw new Error(`ax worker: handler "${name}" is not a function`);
    const concurrency = opts.concurrency ?? 0;
    if (!Number.isInteger(concurrency) || concurrency < 0) throw new Error(`ax worker: handler "${name}": concurrency ${concurrency} must be a positive integer, or 0 for no limit`);
    this.handlers.set(name, { run: fn as Handler<unknown, unknown>, parse: opts.parse, concurrency, busy: 0 });
    return this;
  }

  /** The registered handler names, sorted as Go sorts them (by UTF-16 code unit, the same for ASCII names). */
  get handlerNames(): string[] {
    return [...this.handlers.keys()].sort();
  }

  /** How many slots are taken: attempts that run or are about to. */
  get busy(): number {
    return this.held;
  }

  /** Resolves once run() has registered the worker and made its consumers: work routed to its pools reaches it from then on. */
  ready(): Promise<void> {
    return this.readyPromise;
  }

  /** How many task log lines were lost since the worker started. */
  get logLinesDropped(): number {
    return this.logs?.dropped ?? 0;
  }

  /**
   * handleSignals makes SIGTERM and SIGINT stop the worker (drain: stop
   * pulling, let running attempts finish within shutdownTimeoutMs). It
   * returns a function that removes the listeners.
   */
  handleSignals(signals: NodeJS.Signals[] = ["SIGTERM", "SIGINT"]): () => void {
    const onSignal = (sig: NodeJS.Signals) => {
      this.log.info("signal received; draining", { signal: sig });
      void this.stop();
    };
    for (const s of signals) process.on(s, onSignal);
    return () => signals.forEach((s) => process.off(s, onSignal));
  }

  /**
   * stop drains the worker: it stops pulling, lets running attempts finish
   * for up to shutdownTimeoutMs, then aborts them (they fail with "worker
   * shutting down", to be retried), takes the worker off ax-workers and
   * resolves once run() has returned. It does not close the connection.
   */
  async stop(): Promise<void> {
    if (this.state === "new") {
      this.state = "stopped";
      this.resolveStopped();
    }
    this.stopRequested?.();
    return this.stopped;
  }

  /**
   * run registers the worker and runs attempts until stop(). It rejects at
   * once if AX's streams and buckets are missing (the dispatcher makes
   * them) or the connection may not do what an executor must.
   */
  async run(): Promise<void> {
    if (this.state !== "new") throw new Error("ax worker: run() was already called");
    if (this.handlers.size === 0) throw new Error("ax worker: register at least one handler with handle() before run()");
    this.state = "running";
    const stopSignal = new Promise<void>((resolve) => (this.stopRequested = resolve));
    try {
      await this.setUp();
    } catch (err) {
      this.state = "stopped";
      this.resolveStopped();
      throw new Error(`run ax worker: ${(err as Error).message}`, { cause: err });
    }
    try {
      this.subscribe();
      await this.putWorker();
      this.logs.start();
      this.background.push(setInterval(() => void this.heartbeat(), this.heartbeatMs));
      this.scheduleRenewals();
      this.log.info("worker started", {
        pools: this.pools, slots: this.slots, handlers: this.handlerNames, lease_ttl_ms: this.leaseTTLMs,
      });
      this.resolveReady();
      void this.watchReconnects();
      const closed = this.nc.closed().then(() => {
        if (this.state === "running") throw new Error("run ax worker: the NATS connection was closed");
      });
      closed.catch(() => undefined); // the race below takes it; after run() returns, nobody needs it
      await Promise.race([this.pull(stopSignal), closed]);
    } finally {
      await this.shutdown();
    }
  }

  // --- set-up (executor/service.go setUp) ---

  private async setUp(): Promise<void> {
    const t = this.topology;
    const hint = "AX's streams and buckets are made by the dispatcher: start `ax dispatcher` or `ax dev` first";
    this.js = jetstream(this.nc, { timeout: OP_TIMEOUT_MS });
    this.jsm = await jetstreamManager(this.nc, { timeout: OP_TIMEOUT_MS });
    for (const name of [t.dispatchStream, t.reportsStream, t.logsStream]) {
      try {
        await this.jsm.streams.info(name);
      } catch (err) {
        throw new Error(`look up stream ${name}: ${(err as Error).message}; ${hint}`, { cause: err });
      }
    }
    const kvm = new Kvm(this.js);
    const bucket = async (name: string): Promise<KV> => {
      try {
        const kv = await kvm.open(name);
        await kv.status();
        return kv;
      } catch (err) {
        throw new Error(`look up bucket ${name}: ${(err as Error).message}; ${hint}`, { cause: err });
      }
    };
    this.leases = await bucket(t.leasesBucket);
    this.workers = await bucket(t.workersBucket);
    this.leaseTTLMs = (await this.leases.status()).ttl;
    if (!(this.leaseTTLMs > 0)) throw new Error(`bucket ${t.leasesBucket} has no TTL, so a lease would never expire; ${hint}`);
    const workersTTL = (await this.workers.status()).ttl;
    if (workersTTL > 0 && this.heartbeatMs >= workersTTL) {
      throw new Error(`heartbeat interval ${goDuration(this.heartbeatMs)} is not shorter than the TTL ${goDuration(workersTTL)} of bucket ${t.workersBucket}: the worker would drop off the list between heartbeats; use a shorter heartbeatIntervalMs`);
    }
    // The worker's own queue first: work routed to it alone.
    const own = t.workerConsumer(this.workerId);
    await this.ensureConsumer(own);
    this.own = { pool: WORKER_POOL, priority: "", handler: "", subject: own.filter_subject, consumer: own.durable_name, rung: 0, seen: 0, more: true };
    // Then a queue per priority, pool and handler, in pull order.
    for (const priority of PRIORITIES) {
      for (const pool of this.pools) {
        for (const handler of this.handlerNames) {
          const cfg = t.poolConsumer(pool, priority, handler);
          await this.ensureConsumer(cfg);
          const q: Queue = { pool, priority, handler, subject: cfg.filter_subject, consumer: cfg.durable_name, rung: 0, seen: 0, more: true };
          this.queues.push(q);
          this.byRing.set(`${pool}\x00${priority}\x00${handler}`, q);
        }
      }
    }
    this.startedAt = new Date();
    this.logs = new LogShipper(this.js, t, this.logBuffer, this.logFlushMs, (msg, fields) => this.log.warn(msg, fields));
  }

  /**
   * ensureConsumer creates the durable consumer cfg if it is not there. A
   * consumer that is there keeps its settings, even if they differ: a
   * worker follows the topology, it does not reset it (action "create").
   */
  private async ensureConsumer(cfg: ConsumerSettings): Promise<void> {
    const stream = this.topology.dispatchStream;
    const subject = `$JS.API.CONSUMER.CREATE.${stream}.${cfg.durable_name}.${cfg.filter_subject}`;
    const body = JSON.stringify({ stream_name: stream, config: cfg, action: "create" });
    let reply: Msg;
    try {
      reply = await this.nc.request(subject, body, { timeout: OP_TIMEOUT_MS });
    } catch (err) {
      throw new Error(`create consumer ${cfg.durable_name} on ${stream}: ${(err as Error).message}`, { cause: err });
    }
    const res = reply.json<{ error?: { code: number; err_code: number; description: string } }>();
    if (res.error && res.error.err_code !== ERR_CONSUMER_EXISTS && res.error.err_code !== ERR_CONSUMER_NAME_EXISTS) {
      throw new Error(`create consumer ${cfg.durable_name} on ${stream}: ${res.error.description} (error ${res.error.err_code})`);
    }
  }

  private subscribe(): void {
    const t = this.topology;
    this.control = this.nc.subscribe(t.control(this.workerId), { callback: (err, m) => {
      if (!err) this.onControl(m);
    } });
    this.subs.push(this.nc.subscribe(t.readyWorker(this.workerId), {
      callback: () => {
        this.own.rung++;
        this.ring();
      },
    }));
    for (const pool of this.pools) {
      this.subs.push(this.nc.subscribe(t.readyPool(pool), { callback: (err, m) => {
        if (!err) this.onReady(pool, m.subject);
      } }));
    }
    // One inbox for every no-wait fetch: ax's executor user may subscribe
    // only under its own inbox prefix.
    this.fetchInbox = createInbox((this.nc as unknown as { options?: { inboxPrefix?: string } }).options?.inboxPrefix);
    this.fetchSub = this.nc.subscribe(this.fetchInbox + ".*", {
      callback: (err, m) => {
        if (err) return;
        // A status (404, 408, 409) comes on the fetch's own reply subject;
        // a message comes on its dispatch subject, and belongs to the one
        // fetch in flight (fetches are sequential).
        const status = m.subject.startsWith(this.fetchInbox + ".");
        if (status) {
          if (m.subject === this.fetching?.inbox) this.fetching.on(m);
          return;
        }
        if (this.fetching) this.fetching.on(m);
        else if (m.reply) m.respond("-NAK"); // a message of a fetch that gave up: give it back at once
      },
    });
  }

  // --- registration and heartbeats (executor/heartbeat.go) ---

  private record(): WorkerRecord {
    return {
      id: this.workerId,
      hostname: this.hostname,
      version: this.version,
      pools: [...this.pools],
      handlers: this.handlerNames,
      slots: this.slots,
      busy: this.held,
      started_at: this.startedAt.toISOString(),
      heartbeat_at: new Date().toISOString(),
      protocol: EXECUTOR_PROTOCOL,
    };
  }

  /**
   * putGrants writes (or, with del, deletes) the worker's grant keys, one per
   * pool and handler, as plain publishes on the connection the record is put
   * on next: the server stores them first (executor/heartbeat.go).
   */
  private putGrants(del = false): void {
    const h = del ? headers() : undefined;
    h?.set("KV-Operation", "DEL");
    for (const pool of this.pools) {
      for (const handler of this.handlerNames) {
        this.nc.publish(this.topology.grantSubject(this.workerId, pool, handler), undefined, h ? { headers: h } : undefined);
      }
    }
  }

  private async putWorker(): Promise<void> {
    try {
      this.putGrants();
      await this.workers.put(this.workerId, JSON.stringify(this.record()));
    } catch (err) {
      throw new Error(`put worker ${this.workerId} in ${this.topology.workersBucket}: ${(err as Error).message}`, { cause: err });
    }
  }

  private async heartbeat(): Promise<void> {
    if (this.state !== "running" && this.state !== "stopping") return;
    try {
      await this.putWorker();
    } catch (err) {
      this.log.warn("heartbeat", { error: (err as Error).message });
    }
  }

  // --- pulling (executor/pull.go) ---

  private ring(): void {
    const w = this.wake;
    this.wake = undefined;
    w?.();
  }

  private onReady(pool: string, subject: string): void {
    const rq = this.topology.readyQueue(pool, subject);
    const q = rq && this.byRing.get(`${pool}\x00${rq.priority}\x00${rq.handler}`);
    if (q) q.rung++;
    this.ring();
  }

  /** waitFor resolves on a doorbell, a freed slot, stop, or after ms. */
  private waitFor(ms: number, stop: Promise<void>): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.wake = done;
      void stop.then(done);
    });
  }

  private async pull(stop: Promise<void>): Promise<void> {
    let stopping = false;
    void stop.then(() => {
      stopping = true;
      this.ring();
    });
    let rounds = 0;
    while (!stopping) {
      const free = this.slots - this.held;
      if (free <= 0) {
        await this.waitFor(this.idleWaitMs, stop);
        continue;
      }
      const msgs = await this.fetch(free, rounds % LOW_FIRST_EVERY === LOW_FIRST_EVERY - 1);
      if (msgs.length === 0) {
        await this.waitFor(this.idleWaitMs, stop);
        continue;
      }
      if (stopping) {
        // Fetched but not started: give them back at once.
        for (const m of msgs) m.msg.respond("-NAK");
        break;
      }
      rounds++;
      const batch: Array<{ d: Dispatch; entry: Entry; m: Delivered }> = [];
      for (const m of msgs) {
        const p = this.admit(m);
        if (p) batch.push(p);
      }
      await this.start(batch);
    }
  }

  private async fetch(n: number, lowFirst: boolean): Promise<Delivered[]> {
    const now = Date.now();
    if (now - this.lastSweep >= this.idleWaitMs) {
      this.lastSweep = now;
      await this.sweep();
    }
    const free = new Map<string, number>();
    for (const [name, e] of this.handlers) if (e.concurrency > 0) free.set(name, e.concurrency - e.busy);
    const order = lowFirst ? [...this.queues].reverse() : this.queues;
    const out: Delivered[] = [];
    for (const q of [this.own, ...order]) {
      if (out.length >= n) break;
      if (!(q.more || q.rung !== q.seen)) continue;
      let ask = n - out.length;
      const f = free.get(q.handler);
      if (f !== undefined) {
        if (f <= 0) continue;
        ask = Math.min(ask, f);
      }
      const rung = q.rung;
      let got = 0;
      let failed = false;
      try {
        const batch = await this.fetchNoWait(q, ask);
        out.push(...batch);
        got = batch.length;
      } catch (err) {
        failed = true;
        this.log.warn("fetch dispatch messages", { pool: q.pool, priority: q.priority, handler: q.handler, error: (err as Error).message });
      }
      q.seen = rung;
      q.more = failed || got === ask;
      if (f !== undefined) free.set(q.handler, f - got);
    }
    return out;
  }

  /** fetchNoWait takes up to n messages of q's consumer without waiting for more to come. */
  private fetchNoWait(q: Queue, n: number): Promise<Delivered[]> {
    const inbox = `${this.fetchInbox}.${++this.fetchSeq}`;
    const got: Delivered[] = [];
    return new Promise<Delivered[]>((resolve, reject) => {
      const finish = (err?: Error) => {
        clearTimeout(timer);
        if (this.fetching?.inbox === inbox) this.fetching = undefined;
        if (err && got.length === 0) reject(err);
        else resolve(got);
      };
      const timer = setTimeout(() => finish(new Error(`no answer from ${q.consumer} within ${goDuration(OP_TIMEOUT_MS)}`)), OP_TIMEOUT_MS);
      this.fetching = {
        inbox,
        on: (m) => {
          if (m.subject === inbox) {
            // 404 no messages, 408 request expired: the end of this fetch;
            // 409 and others (consumer deleted, limits): trouble.
            const code = m.headers?.code ?? 0;
            finish(code === 404 || code === 408 ? undefined : new Error(`${q.consumer}: ${code} ${m.headers?.description ?? ""}`.trim()));
            return;
          }
          if (got.length >= n) {
            m.respond("-NAK");
            return;
          }
          got.push({ msg: m, delivered: deliveryCount(m.reply ?? "") });
          if (got.length >= n) finish();
        },
      };
      this.nc.publish(`$JS.API.CONSUMER.MSG.NEXT.${this.topology.dispatchStream}.${q.consumer}`, JSON.stringify({ batch: n, no_wait: true }), { reply: inbox });
    });
  }

  /**
   * sweep marks hot the queues whose subjects hold messages (one stream
   * info per pool), and the worker's own queue: so that work whose
   * doorbell was missed, or given back with a delay, is found within idleWaitMs.
   */
  private async sweep(): Promise<void> {
    this.own.more = true;
    for (const pool of this.pools) {
      let subjects: Record<string, number> | undefined;
      let failed = false;
      try {
        const info = await this.jsm.streams.info(this.topology.dispatchStream, { subjects_filter: this.topology.dispatch(pool, "*", ">") });
        subjects = info.state.subjects ?? {};
      } catch (err) {
        failed = true;
        this.log.warn("read the pool's queue depths; fetching every queue", { pool, error: (err as Error).message });
      }
      for (const q of this.queues) {
        if (q.pool === pool && (failed || (subjects?.[q.subject] ?? 0) > 0)) q.more = true;
      }
    }
  }

  // --- admission (executor/admit.go) ---

  private admit(m: Delivered): { d: Dispatch; entry: Entry; m: Delivered } | undefined {
    let d: Dispatch;
    try {
      d = decodeDispatch(m.msg.subject, m.msg.data);
      const h = m.msg.headers;
      this.traces.set(d, { subject: m.msg.subject, traceparent: h?.get("traceparent") || undefined, tracestate: h?.get("tracestate") || undefined });
    } catch (err) {
      this.log.error("undecodable dispatch message; terminating it", { subject: m.msg.subject, error: (err as Error).message });
      m.msg.respond("+TERM");
      return undefined;
    }
    const protocol = Math.max(d.protocol ?? 1, 1);
    if (protocol > EXECUTOR_PROTOCOL) {
      // Written for a later protocol than this worker speaks: leave it to one that does.
      this.taskLog(d).warn("the attempt is written in a later executor protocol than this worker speaks; giving it back for a worker that does", {
        protocol, speaks: EXECUTOR_PROTOCOL, delay_ms: UNREGISTERED_DELAY_MS,
      });
      nakWithDelay(m.msg, UNREGISTERED_DELAY_MS);
      return undefined;
    }
    const entry = this.handlers.get(d.handler);
    if (!entry) {
      // Only the worker's own queue can hold it: work pinned here by name.
      // It waits for a worker that has the handler; it never fails for want of it.
      this.taskLog(d).warn("the attempt was routed to this worker, which has no such handler; it waits for a worker that has it", {
        handler: d.handler, handlers: this.handlerNames, delay_ms: UNREGISTERED_DELAY_MS,
      });
      nakWithDelay(m.msg, UNREGISTERED_DELAY_MS);
      return undefined;
    }
    if (entry.concurrency > 0 && entry.busy >= entry.concurrency) {
      this.taskLog(d).debug("attempt cannot start yet; requeueing it", { handler: d.handler, reason: "the handler's slots are full" });
      nakWithDelay(m.msg, this.requeueDelayMs);
      return undefined;
    }
    entry.busy++;
    this.held++;
    return { d, entry, m };
  }

  private unadmit(entry: Entry): void {
    entry.busy--;
    this.held--;
    this.ring();
  }

  // --- start: lease, ack, run (executor/attempt.go start) ---

  private async start(batch: Array<{ d: Dispatch; entry: Entry; m: Delivered }>): Promise<void> {
    batch = await this.fence(batch);
    if (batch.length === 0) return;
    const now = new Date();
    const results = await Promise.allSettled(batch.map(async ({ d }) => {
      const key = leaseKey(d.instance_id, d.attempt);
      const lease = JSON.stringify({ instance_id: d.instance_id, attempt: d.attempt, worker_id: this.workerId, acquired_at: now.toISOString() });
      // Create-only: a key never written (nor deleted or expired within
      // the last TTL: the bucket's max age removes an expiry marker too)
      // means no one ran this attempt lately.
      const ack = await this.js.publish(`$KV.${this.topology.leasesBucket}.${key}`, lease, { expect: { lastSubjectSequence: 0 }, timeout: OP_TIMEOUT_MS });
      return { key, lease, revision: ack.seq };
    }));
    // The handler runs only after the server confirmed the ack (a double
    // ack): a plain ack lost in a kill -9 of the server, with the message's
    // delivery count, brings the message back as a first delivery, which
    // asks no fence, once the lease's expiry marker is gone
    // (executor/attempt.go confirmAcks).
    const acked = await Promise.allSettled(results.map(async (r, i) => {
      if (r.status !== "fulfilled") return;
      await this.nc.request(batch[i].m.msg.reply!, "+ACK", { timeout: OP_TIMEOUT_MS });
    }));
    // The handlers start now, after the lease and the ack's confirmation:
    // the start the reports give, and the deadline, count from here.
    const startedAt = new Date();
    const started: Attempt[] = [];
    results.forEach((r, i) => {
      const { d, entry, m } = batch[i];
      const log = this.taskLog(d);
      if (r.status === "fulfilled" && acked[i].status === "fulfilled") {
        started.push(this.register(d, entry, r.value.key, r.value.lease, r.value.revision, startedAt));
        return;
      }
      this.unadmit(entry);
      if (r.status === "fulfilled") {
        log.warn("the server did not confirm the ack of the dispatch message; not running the attempt, whose lease expires unrenewed and is failed as lost", {
          error: String((acked[i] as PromiseRejectedResult).reason),
        });
        return;
      }
      if (isWrongLastSequence(r.reason)) {
        log.info("attempt is leased already: another delivery runs or ran it; terminating this one");
        m.msg.respond("+TERM");
      } else {
        log.error("create lease; giving the dispatch message back for later", { error: (r.reason as Error).message });
        nakWithDelay(m.msg, this.idleWaitMs);
      }
    });
    for (const a of started) {
      if (this.startedDelayMs < 0) {
        await this.sendStarted(a);
      } else {
        a.startedTimer = setTimeout(() => void this.sendStarted(a), this.startedDelayMs);
      }
      const p = this.runAttempt(a).catch((err) => {
        this.log.error("attempt failed unexpectedly", { error: String(err) });
        endRun(a.run, undefined, err, `attempt failed unexpectedly: ${String(err)}`);
      });
      this.reporting.add(p);
      void p.finally(() => this.reporting.delete(p));
    }
  }

  /**
   * fence asks the dispatchers, for each redelivered message (delivered
   * more than once) and each republished one (its dispatch says
   * `republished`: an earlier message of the attempt may have run), whether
   * its attempt provably never ran: a server that lost an acknowledged ack
   * may have lost the lease too, so the lease alone does not fence them
   * (executor/fence.go). A "no" terminates the message; no answer gives it
   * back to ask again. First deliveries of first dispatches go on.
   */
  private async fence(batch: Array<{ d: Dispatch; entry: Entry; m: Delivered }>): Promise<Array<{ d: Dispatch; entry: Entry; m: Delivered }>> {
    // For a while after a reconnection a first delivery asks too: a server
    // killed with kill -9 can deliver again, as new, a message whose ack it
    // had confirmed (executor/fence.go justReconnected).
    const recent = this.reconnectedAt > 0 && Date.now() - this.reconnectedAt < Math.max(this.leaseTTLMs, RECONNECT_WINDOW_MS);
    const ask = (p: { d: Dispatch; m: Delivered }) => recent || p.m.delivered > 1 || p.d.republished === true;
    if (!batch.some(ask)) return batch;
    const answers = await Promise.all(batch.map((p) => (ask(p) ? this.askFence(p.d).then((a) => a, (err: Error) => err) : undefined)));
    return batch.filter((p, i) => {
      const a = answers[i];
      if (a === undefined) return true;
      const log = this.taskLog(p.d);
      if (a instanceof Error) {
        log.warn("redelivered attempt not started: no dispatcher answered whether it ran; giving it back to ask again", { error: a.message, delay_ms: this.idleWaitMs });
        this.unadmit(p.entry);
        nakWithDelay(p.m.msg, this.idleWaitMs);
        return false;
      }
      if (a.start) {
        log.info("redelivered attempt may start: the dispatcher says it never ran", { reason: a.reason });
        return true;
      }
      log.info("redelivered attempt must not start; terminating this delivery", { reason: a.reason });
      this.unadmit(p.entry);
      p.m.msg.respond("+TERM");
      return false;
    });
  }

  private async askFence(d: Dispatch): Promise<FenceAnswer> {
    const subject = this.topology.fence(d.pool || DEFAULT_POOL, this.workerId, d.instance_id);
    let reply: Msg;
    try {
      reply = await this.nc.request(subject, JSON.stringify({ instance_id: d.instance_id, attempt: d.attempt, worker_id: this.workerId }), { timeout: FENCE_TIMEOUT_MS });
    } catch (err) {
      throw new Error(`ask ${subject}: ${(err as Error).message}`, { cause: err });
    }
    let a: FenceAnswer;
    try {
      a = reply.json<FenceAnswer>();
    } catch (err) {
      throw new Error(`ask ${subject}: the answer is not JSON: ${(err as Error).message}`, { cause: err });
    }
    if (typeof a?.start !== "boolean") throw new Error(`ask ${subject}: the answer has no boolean "start": ${reply.string()}`);
    return a;
  }

  private register(d: Dispatch, entry: Entry, key: string, lease: string, revision: number, startedAt: Date): Attempt {
    const controller = new AbortController();
    const deadline = new Date(startedAt.getTime() + d.timeout_ms);
    const timer = setTimeout(() => controller.abort(new TimeoutError(d.timeout_ms)), d.timeout_ms);
    const run = startRun(d, this.traces.get(d), this.workerId, startedAt);
    const a: Attempt = { d, key, lease, revision, fence: revision, entry, startedAt, deadline, run, controller, timer, log: this.taskLog(d), started: "pending" };
    this.running.set(key, a);
    return a;
  }

  private taskLog(d: Dispatch): Logger {
    return childLogger(this.log, { task: d.task, instance_id: d.instance_id, attempt: d.attempt });
  }

  /** The logger a handler gets: lines ship to AX_LOGS and are copied to the worker's log. */
  private handlerLogger(a: Attempt): Logger {
    const base = { instance_id: a.d.instance_id, task: a.d.task, attempt: a.d.attempt, worker_id: this.workerId };
    const line = (level: Level) => (message: string, fields?: Record<string, unknown>) => {
      this.logs.add(base, level, String(message), fields);
      a.log[level](String(message), fields);
    };
    return { debug: line("debug"), info: line("info"), warn: line("warn"), error: line("error") };
  }

  private reportSubject(d: Dispatch): string {
    return this.topology.report(d.pool || DEFAULT_POOL, this.workerId, d.instance_id);
  }

  /**
   * reportID is a report's Nats-Msg-Id: "<instance>-<attempt>-started-<nonce>"
   * or "<instance>-<attempt>-final-<nonce>", the nonce the worker's own random
   * one, so that a retried publish is a duplicate and no one else can take the id first.
   */
  private reportID(d: Dispatch, kind: ReportKind): string {
    return `${d.instance_id}-${d.attempt}-${kind === "started" ? "started" : "final"}-${this.nonce}`;
  }

  // --- the started report (executor/started.go) ---

  private sendStarted(a: Attempt): Promise<void> {
    if (a.started !== "pending") return a.startedSent ?? Promise.resolve();
    a.started = "sending";
    const rep: Report = {
      instance_id: a.d.instance_id, attempt: a.d.attempt, worker_id: this.workerId, kind: "started",
      at: a.startedAt.toISOString(), started_at: a.startedAt.toISOString(),
    };
    a.startedSent = this.js.publish(this.reportSubject(a.d), JSON.stringify(rep), { msgID: this.reportID(a.d, "started"), timeout: OP_TIMEOUT_MS })
      .then(() => undefined, (err) => a.log.warn("report started; the final report will record the start", { error: (err as Error).message }))
      .finally(() => {
        a.started = "done";
      });
    return a.startedSent;
  }

  /** settleStarted: a started report not sent yet never will be; one being sent is awaited, so it reaches the stream first. */
  private async settleStarted(a: Attempt): Promise<void> {
    clearTimeout(a.startedTimer);
    if (a.started === "sending") await a.startedSent;
    a.started = "done";
  }

  // --- progress (executor/progress.go) ---

  /** progress keeps the attempt's latest progress and makes sure a send of it is due. */
  private progress(a: Attempt, done: number, total: number, message: string): void {
    const p = checkProgress(done, total, message);
    if (a.progress?.closed) throw new Error("progress: the attempt has ended; its final report says the rest");
    const signal = a.controller.signal;
    if (signal.aborted) {
      const reason = signal.reason as unknown;
      throw new Error(`progress: ${reason instanceof Error ? reason.message : String(reason)}`, { cause: reason });
    }
    // The dispatcher applies progress to a RUNNING attempt only: the
    // started report goes first, at once.
    const ps = (a.progress ??= { started: this.sendStarted(a), sending: false, last: 0, closed: false });
    ps.latest = { p, at: new Date() };
    this.scheduleProgress(a, ps);
  }

  /** scheduleProgress makes the next send due when the interval since the last one has passed, unless one is due or on its way. */
  private scheduleProgress(a: Attempt, ps: ProgressState): void {
    if (ps.timer || ps.sending || ps.closed || !ps.latest) return;
    // A timer even when no wait is left, so that a burst of calls in one
    // turn of the event loop goes as one report of its last value.
    ps.timer = setTimeout(() => void this.sendProgress(a, ps), Math.max(0, ps.last + PROGRESS_INTERVAL_MS - Date.now()));
  }

  /** sendProgress publishes the latest value, after the started report, without a Nats-Msg-Id. */
  private async sendProgress(a: Attempt, ps: ProgressState): Promise<void> {
    ps.timer = undefined;
    ps.sending = true;
    try {
      await ps.started;
      const v = ps.latest;
      ps.latest = undefined;
      if (ps.closed || !v) return;
      const rep: Report = {
        instance_id: a.d.instance_id, attempt: a.d.attempt, worker_id: this.workerId, kind: "progress",
        at: v.at.toISOString(), started_at: a.startedAt.toISOString(), progress: v.p,
      };
      // No Nats-Msg-Id: a progress report published twice is harmless, the
      // dispatcher keeps only a newer one than it has.
      try {
        await this.js.publish(this.reportSubject(a.d), JSON.stringify(rep), { timeout: OP_TIMEOUT_MS });
      } catch (err) {
        a.log.warn("report progress; the next value will be sent anyway", { error: (err as Error).message, done: v.p.done, total: v.p.total });
      }
      ps.last = Date.now();
    } finally {
      ps.sending = false;
    }
    this.scheduleProgress(a, ps);
  }

  /** endProgress: the handler has returned, so no progress report is sent after, and a pending value is dropped. */
  private endProgress(a: Attempt): void {
    const ps = (a.progress ??= { started: Promise.resolve(), sending: false, last: 0, closed: true });
    ps.closed = true;
    ps.latest = undefined;
    clearTimeout(ps.timer);
    ps.timer = undefined;
  }

  // --- running and reporting (executor/attempt.go runAttempt, outcome) ---

  private async runAttempt(a: Attempt): Promise<void> {
    a.log.debug("attempt started", { handler: a.d.handler });
    const r = await this.invoke(a);
    this.endProgress(a);
    clearTimeout(a.timer);
    const cause: unknown = a.controller.signal.aborted ? a.controller.signal.reason : undefined;
    await this.settleStarted(a);
    if (cause instanceof LeaseLostError) {
      this.release(a);
      if (r.returnedAt === undefined || r.err !== undefined) {
        a.log.warn("lease lost; the dispatcher has moved on, so the attempt is not reported");
        endRun(a.run, undefined, r.err, "lease lost: the attempt is not reported");
        return;
      }
      // A success is reported all the same (executor/attempt.go): a lapsed
      // lease is no proof the dispatcher moved on (a restarted nats-server
      // ages every lease out), and PostgreSQL's guarded write decides
      // whether it counts.
      a.log.warn("lease lost after the handler succeeded; reporting the success, which counts only if the attempt is still current");
    }
    const rep = this.outcome(a, r, cause);
    if (!(await this.logs.flush(OP_TIMEOUT_MS))) a.log.warn("reporting the attempt before all of its log lines are stored");
    let data = JSON.stringify(rep);
    const max = this.nc.info?.max_payload ?? 1 << 20;
    if (Buffer.byteLength(data) > max - REPORT_HEADROOM) {
      const size = Buffer.byteLength(JSON.stringify(rep.output));
      delete rep.output;
      rep.kind = "failed";
      rep.permanent = true;
      rep.error = `output of ${size} bytes is larger than the NATS server's max payload of ${max} bytes allows; store large results elsewhere and return a reference`;
      data = JSON.stringify(rep);
    }
    try {
      if (a.d.report_batches && !this.singleReports) await this.sendFinal(a.d, rep.kind, data);
      else await this.publishRetry(this.reportSubject(a.d), data, this.reportID(a.d, rep.kind));
    } catch (err) {
      // Without a report the lease must expire for the dispatcher to move on.
      this.release(a);
      a.log.error("report attempt; leaving its lease to expire", { outcome: rep.kind, error: (err as Error).message });
      endRun(a.run, rep, r.err, `report attempt: ${(err as Error).message}`);
      return;
    }
    endRun(a.run, rep, r.err);
    const fields: Record<string, unknown> = { outcome: rep.kind, duration_ms: Date.parse(rep.at) - a.startedAt.getTime() };
    if (rep.kind === "failed") a.log.warn("attempt finished", { ...fields, error: rep.error, permanent: rep.permanent ?? false });
    else if (rep.kind === "released") a.log.warn("attempt finished", { ...fields, reason: rep.error });
    else a.log.info("attempt finished", fields);
    // The report is stored: the lease is no longer renewed and ages out one TTL after its last renewal.
    this.release(a);
    if (rep.kind === "released") {
      // A handed-back attempt's lease goes now rather than one TTL later:
      // the reaper takes a delete for a retired lease (only an expiry is a
      // death), and the released report decides the attempt.
      try {
        await this.leases.delete(a.key);
      } catch (err) {
        a.log.warn("delete the lease of a handed-back attempt; it expires with its TTL instead", { error: (err as Error).message });
      }
    }
  }

  private release(a: Attempt): void {
    if (this.running.get(a.key) !== a) return;
    this.running.delete(a.key);
    this.unadmit(a.entry);
  }

  /** invoke calls the handler; if it ignores its signal's abort for ABANDON_AFTER_MS, the attempt is reported without it. */
  private async invoke(a: Attempt): Promise<{ out?: unknown; err?: unknown; returnedAt?: Date }> {
    const signal = a.controller.signal;
    const call = (async () => {
      const refused = unsupported(a.d);
      if (refused) throw new PermanentError(refused);
      let payload: unknown = a.d.payload;
      if (a.entry.parse) {
        try {
          payload = a.entry.parse(a.d.payload);
        } catch (err) {
          throw new PermanentError(`task "${a.d.task}": payload does not fit: ${(err as Error)?.message ?? String(err)}`, { cause: err });
        }
      }
      return otelContext.with(a.run.context, () => a.entry.run(this.context(a), payload));
    })().then((out) => ({ out, returnedAt: new Date() }), (err: unknown) => ({ err: err ?? new Error("the handler threw " + String(err)), returnedAt: new Date() }));
    const aborted = new Promise<void>((resolve) => {
      if (signal.aborted) resolve();
      else signal.addEventListener("abort", () => resolve(), { once: true });
    });
    const first = await Promise.race([call, aborted.then(() => undefined)]);
    if (first) return first;
    let timer: NodeJS.Timeout | undefined;
    const abandoned = new Promise<{ err: unknown }>((resolve) => {
      timer = setTimeout(() => resolve({ err: signal.reason }), ABANDON_AFTER_MS);
    });
    const r = await Promise.race([call, abandoned]);
    clearTimeout(timer);
    if (!("returnedAt" in r)) {
      a.log.error("handler did not return after its signal aborted; abandoning it and reporting the attempt", {
        error: String((signal.reason as Error)?.message ?? signal.reason), waited_ms: ABANDON_AFTER_MS,
      });
    }
    return r;
  }

  private context(a: Attempt): Context {
    const d = a.d;
    return Object.freeze({
      instanceId: d.instance_id,
      task: d.task,
      attempt: d.attempt,
      maxAttempts: d.max_attempts,
      eventId: d.event_id,
      priority: d.priority,
      firedAt: new Date(d.fired_at),
      deadline: a.deadline,
      signal: a.controller.signal,
      logger: this.handlerLogger(a),
      workerId: this.workerId,
      payload: d.payload,
      runId: d.run_id,
      parents: d.parents,
      shardIndex: d.shard_index,
      shardCount: d.shard_count,
      dispatch: d,
      traceparent: traceparentOf(a.run.span),
      fence: a.fence,
      progress: (done: number, total = 0, message = "") => this.progress(a, done, total, message),
    });
  }

  /**
   * outcome builds the final report. A result returned after the deadline
   * is a timeout whatever it is; a deadline, cancel or shutdown is the
   * outcome whatever the handler made of it.
   */
  private outcome(a: Attempt, r: { out?: unknown; err?: unknown; returnedAt?: Date }, cause: unknown): Report {
    const rep: Report = {
      instance_id: a.d.instance_id, attempt: a.d.attempt, worker_id: this.workerId,
      kind: "failed", at: new Date().toISOString(), started_at: a.startedAt.toISOString(),
    };
    const traceparent = traceparentOf(a.run.span);
    if (traceparent) rep.traceparent = traceparent;
    const returned = r.returnedAt !== undefined;
    if (returned && r.err === undefined && cause instanceof TimeoutError && r.returnedAt!.getTime() > a.deadline.getTime()) {
      rep.error = `${cause.message} (the handler ignored its deadline and returned a result ${goDuration(r.returnedAt!.getTime() - a.deadline.getTime())} after it)`;
      return rep;
    }
    if (returned && r.err === undefined) {
      if (r.out === undefined || r.out === null) {
        rep.kind = "succeeded";
        return rep;
      }
      let text: string | undefined;
      try {
        text = JSON.stringify(r.out);
      } catch (err) {
        rep.error = `encode output: ${(err as Error).message}`;
        rep.permanent = true;
        return rep;
      }
      if (text === undefined) {
        rep.error = `encode output: a ${typeof r.out} is not a JSON value`;
        rep.permanent = true;
        return rep;
      }
      rep.kind = "succeeded";
      rep.output = JSON.parse(text);
      if (rep.output === null) delete rep.output;
      return rep;
    }
    if (cause instanceof ShutdownError) {
      // The worker is leaving and its grace passed: the attempt is handed
      // back, to run again elsewhere without spending one of its attempts.
      rep.kind = "released";
      rep.error = `handed back: worker ${this.workerId} stopped and its shutdown timeout of ${goDuration(this.shutdownMs)} passed before the handler returned`;
      const e = r.err;
      if (returned && e !== undefined && e !== cause && !isAbortError(e)) rep.error += " (handler returned: " + errorText(e) + ")";
      return rep;
    }
    if (cause instanceof Error) {
      rep.error = cause.message;
      const e = r.err;
      if (returned && e !== undefined && e !== cause && !isAbortError(e)) rep.error += " (handler returned: " + errorText(e) + ")";
      return rep;
    }
    rep.error = errorText(r.err);
    if (isPermanent(r.err)) rep.permanent = true;
    const wait = retryAfter(r.err);
    if (wait !== undefined && !rep.permanent) rep.retry_after_ms = Math.max(Math.round(wait), 1); // 0 on the wire means the backoff
    if (rep.error === "") rep.error = "the handler returned an error with an empty message";
    return rep;
  }

  // --- final reports in batches (executor/finals.go) ---
  //
  // The final reports of the attempts whose dispatch message says the
  // dispatchers take report batches go through one sender: what is queued
  // when it is free goes out as one message per pool, and what is queued
  // while that message is published waits for the next. There is no
  // linger: a lone report goes at once on its attempt's own subject.

  /** watchReconnects dates the connection's reconnections, for the fence. */
  private async watchReconnects(): Promise<void> {
    for await (const st of this.nc.status()) {
      if (st.type === "reconnect") this.reconnectedAt = Date.now();
    }
  }

  /** sendFinal publishes the final report of d, encoded as data, through the sender; it settles once the report is stored (or failed to be). */
  private sendFinal(d: Dispatch, kind: ReportKind, data: string): Promise<void> {
    return new Promise((resolve, reject) => {
      this.finalQueue.push({ d, kind, data, resolve, reject });
      if (!this.sendingFinals) void this.sendFinals();
    });
  }

  /** sendFinals publishes what is queued until nothing is. */
  private async sendFinals(): Promise<void> {
    this.sendingFinals = true;
    try {
      while (this.finalQueue.length > 0) {
        const queued = this.finalQueue;
        this.finalQueue = [];
        await this.publishFinals(queued);
      }
    } finally {
      this.sendingFinals = false;
    }
  }

  /** publishFinals publishes queued as batches, by pool, each within the max payload and MAX_BATCH_REPORTS; a batch of one is a single report. */
  private async publishFinals(queued: QueuedFinal[]): Promise<void> {
    const byPool = new Map<string, QueuedFinal[]>();
    for (const q of queued) {
      const pool = q.d.pool || DEFAULT_POOL;
      const qs = byPool.get(pool);
      if (qs) qs.push(q);
      else byPool.set(pool, [q]);
    }
    const limit = (this.nc.info?.max_payload ?? 1 << 20) - REPORT_HEADROOM;
    for (const [pool, all] of byPool) {
      let qs = all;
      while (qs.length > 0) {
        let n = 0;
        let size = '{"reports":[]}'.length;
        while (n < qs.length && n < MAX_BATCH_REPORTS) {
          const len = Buffer.byteLength(qs[n].data) + 1;
          if (n > 0 && size + len > limit) break;
          size += len;
          n++;
        }
        const batch = qs.slice(0, n);
        qs = qs.slice(n);
        try {
          if (batch.length === 1) {
            await this.publishRetry(this.reportSubject(batch[0].d), batch[0].data, this.reportID(batch[0].d, batch[0].kind));
          } else {
            // The batch's id, unique to this run of the worker and ending in
            // its random nonce, makes a retried publish a duplicate the stream drops.
            const id = `batch-${++this.batchSeq}-${this.nonce}`;
            await this.publishRetry(this.topology.reportBatch(pool, this.workerId), `{"reports":[${batch.map((q) => q.data).join(",")}]}`, id);
          }
          for (const q of batch) q.resolve();
        } catch (err) {
          for (const q of batch) q.reject(err as Error);
        }
      }
    }
  }

  /**
   * publishRetry publishes a report until it is stored or REPORT_PATIENCE_MS
   * has passed, each try awaited for at most REPORT_TRY_MS: a try sent as the
   * server went down is followed by another once it is back, within the
   * grace the dispatcher leaves lapsed leases after it reconnects.
   */
  private async publishRetry(subject: string, data: string, msgID: string): Promise<void> {
    const deadline = Date.now() + REPORT_PATIENCE_MS;
    for (let i = 0; ; i++) {
      try {
        await this.js.publish(subject, data, { msgID, timeout: REPORT_TRY_MS });
        return;
      } catch (err) {
        const wait = PUBLISH_BACKOFF_MS[Math.min(i, PUBLISH_BACKOFF_MS.length - 1)];
        // A closed connection does not come back: nothing to wait for.
        if (this.nc.isClosed() || Date.now() + wait > deadline) throw new Error(`publish to ${subject}: ${(err as Error).message} (after ${i + 1} tries over ${REPORT_PATIENCE_MS} ms)`, { cause: err });
        await new Promise((resolve) => setTimeout(resolve, wait));
      }
    }
  }

  // --- lease renewal (executor/lease.go renewLeases) ---

  private scheduleRenewals(): void {
    const tick = async () => {
      await this.renew();
      try {
        const ttl = (await this.leases.status()).ttl;
        if (ttl > 0 && ttl !== this.leaseTTLMs) {
          this.log.info("lease TTL changed; renewing every third of it", { lease_ttl_ms: ttl, was_ms: this.leaseTTLMs });
          this.leaseTTLMs = ttl;
        }
      } catch (err) {
        this.log.debug("read the leases bucket's TTL; keeping the one read before", { error: (err as Error).message });
      }
      if (this.state === "running" || this.state === "stopping") this.renewTimer = setTimeout(() => void tick(), this.leaseTTLMs / 3);
    };
    this.renewTimer = setTimeout(() => void tick(), this.leaseTTLMs / 3);
  }

  private renewTimer?: NodeJS.Timeout;

  /**
   * renew renews every running attempt's lease, each write expecting the
   * revision the worker last wrote: if the lease expired meanwhile, the
   * write fails and the attempt's signal aborts with a LeaseLostError.
   */
  private async renew(): Promise<void> {
    const as = [...this.running.values()];
    await Promise.all(as.map(async (a) => {
      try {
        const ack = await this.js.publish(`$KV.${this.topology.leasesBucket}.${a.key}`, a.lease, { expect: { lastSubjectSequence: a.revision }, timeout: OP_TIMEOUT_MS });
        if (this.running.get(a.key) === a) a.revision = ack.seq;
      } catch (err) {
        if (this.running.get(a.key) !== a) return;
        if (isWrongLastSequence(err)) {
          a.log.warn("lease expired before its renewal; cancelling the attempt");
          a.controller.abort(new LeaseLostError());
        } else {
          a.log.warn("renew lease; trying again at the next renewal", { error: (err as Error).message });
        }
      }
    }));
  }

  // --- cancel (executor/control.go) ---

  private onControl(m: Msg): void {
    let c: Control;
    try {
      c = m.json<Control>();
    } catch (err) {
      this.log.warn("undecodable control message; ignoring it", { error: (err as Error).message });
      return;
    }
    if (c.action !== "cancel") {
      this.log.warn("unknown control action; ignoring it", { action: c.action });
      return;
    }
    const found = [...this.running.values()].filter((a) => a.d.instance_id === c.instance_id && (!c.attempt || a.d.attempt === c.attempt));
    if (found.length === 0) {
      this.log.info("cancel of an attempt that does not run here; ignoring it", { instance_id: c.instance_id, attempt: c.attempt, reason: c.reason });
      return;
    }
    for (const a of found) {
      a.log.info("cancelling attempt", { reason: c.reason });
      a.controller.abort(new CancelledError(c.reason ?? ""));
    }
  }

  // --- drain (executor/service.go Run, drain) ---

  private async shutdown(): Promise<void> {
    this.state = "stopping";
    this.stopRequested?.(); // ends the pull loop, if the connection's end ended run()
    for (const s of this.subs) s.unsubscribe();
    this.subs = [];
    if (this.running.size > 0) this.log.info("waiting for running attempts", { busy: this.held, shutdown_timeout_ms: this.shutdownMs });
    const all = () => Promise.all([...this.reporting]);
    let timer: NodeJS.Timeout | undefined;
    const graceOver = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), this.shutdownMs)));
    const late = await Promise.race([all().then(() => false), graceOver]);
    clearTimeout(timer);
    if (late) {
      this.log.warn("shutdown timeout passed; cancelling running attempts and handing them back", { busy: this.held });
      for (const a of this.running.values()) a.controller.abort(new ShutdownError());
      await all();
    }
    this.control?.unsubscribe();
    this.fetchSub?.unsubscribe();
    for (const t of this.background) clearInterval(t);
    clearTimeout(this.renewTimer);
    this.state = "stopped";
    if (!this.nc.isClosed()) {
      await this.logs?.stop();
      try {
        if (this.workers) this.putGrants(true);
        await this.workers?.delete(this.workerId);
      } catch (err) {
        this.log.warn("delete worker from the list; it drops off when its TTL passes", { error: (err as Error).message });
      }
    }
    this.log.info("worker stopped");
    this.resolveStopped();
  }
}

/**
 * unsupported says why this worker must not run the attempt d, or "" if it
 * may: what the Go executor does for it, this SDK does not do yet, and
 * running it without would break the task's rule. The attempt then fails
 * permanently, saying so, as the Go executor fails one it cannot serve.
 */
function unsupported(d: Dispatch): string {
  if (d.mutex_template) {
    return `task "${d.task}" has a concurrency.mutex_key (${d.mutex_template}), which the Node SDK does not hold: run the task on a Go executor (ax executor), or remove its mutex_key`;
  }
  const encoded = envelope(d.payload);
  if (encoded) {
    return `task "${d.task}": payload is encoded (${encoded}) and this worker has no codec to decode it: the Node SDK has no payload codec; run the task on a Go executor with the key (ax executor --codec-key-file)`;
  }
  for (const [name, p] of Object.entries(d.parents ?? {})) {
    const e = envelope(p?.output);
    if (e) return `task "${d.task}": output of parent "${name}" is encoded (${e}) and this worker has no codec to decode it: run the task on a Go executor with the key (ax executor --codec-key-file)`;
  }
  return "";
}

/** envelope names a payload codec's envelope {"ax_codec": …, "key_id": …} (schemas/codec.go), "" for any other value. */
function envelope(v: unknown): string {
  if (v === null || typeof v !== "object" || Array.isArray(v)) return "";
  const e = v as { ax_codec?: unknown; key_id?: unknown };
  if (typeof e.ax_codec !== "string" || e.ax_codec === "") return "";
  return `ax_codec ${e.ax_codec}, key_id ${typeof e.key_id === "string" ? e.key_id : ""}`;
}

function positive(name: string, v: number | undefined, def: number): number {
  if (v === undefined || v === 0) return def;
  if (!Number.isFinite(v) || v < 0) throw new Error(`ax worker options: ${name} is ${v}; use a positive number, or 0 for the default`);
  return v;
}

function defaultWorkerID(): string {
  let host = os.hostname().replace(/[^A-Za-z0-9_-]/g, "-").replace(/^-+|-+$/g, "").slice(0, 100);
  if (host === "") host = "worker";
  const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789";
  return host + "-" + [...randomBytes(6)].map((b) => alphabet[b % alphabet.length]).join("");
}

function childLogger(log: Logger, fields: Record<string, unknown>): Logger {
  const at = (l: Level) => (message: string, more?: Record<string, unknown>) => log[l](message, { ...fields, ...more });
  return { debug: at("debug"), info: at("info"), warn: at("warn"), error: at("error") };
}

function nakWithDelay(m: Msg, ms: number): void {
  m.respond(`-NAK ${JSON.stringify({ delay: ms * 1e6 })}`);
}

/** deliveryCount reads how many times a message was delivered from its ack subject ($JS.ACK.…). */
function deliveryCount(reply: string): number {
  const t = reply.split(".");
  // $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>, or
  // $JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<delivered>.… (12 tokens or more).
  const i = t.length === 9 ? 4 : t.length >= 12 ? 6 : -1;
  const n = i >= 0 ? Number(t[i]) : NaN;
  return Number.isFinite(n) && n > 0 ? n : 1;
}

function isWrongLastSequence(err: unknown): boolean {
  return err instanceof JetStreamApiError && err.code === ERR_WRONG_LAST_SEQUENCE;
}

function isAbortError(e: unknown): boolean {
  return e instanceof Error && (e.name === "AbortError" || e instanceof TimeoutError || e instanceof CancelledError || e instanceof ShutdownError);
}

function errorText(e: unknown): string {
  if (e instanceof Error) return e.message;
  if (typeof e === "string") return e;
  try {
    return JSON.stringify(e) ?? String(e);
  } catch {
    return String(e);
  }
}
