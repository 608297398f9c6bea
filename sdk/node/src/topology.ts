// The names AX gives its subjects, streams, consumers and buckets: a port
// of the Go package streams (topology.go, consumers.go). They must stay the
// same as Go's, byte for byte: the dispatcher, the Go executors and this
// SDK meet on them.

/** The priorities, highest first: the order a worker drains its queues. */
export const PRIORITIES = ["urgent", "normal", "low"] as const;
export type Priority = (typeof PRIORITIES)[number];

/** The pool of a task without tags. */
export const DEFAULT_POOL = "default";

/** The reserved pool whose subjects address one executor. */
export const WORKER_POOL = "worker";

/** How long a fetched message may stay un-acked before JetStream delivers it again (ms). */
export const DEFAULT_ACK_WAIT_MS = 30_000;

/** How long a worker's own consumer outlives its last fetch (ms). */
export const WORKER_CONSUMER_INACTIVE_MS = 60 * 60 * 1000;

const prefixRE = /^[a-z][a-z0-9_-]{0,31}$/;

/** The JetStream consumer settings a worker creates, in the server's JSON names. */
export interface ConsumerSettings {
  durable_name: string;
  description: string;
  filter_subject: string;
  ack_policy: "explicit";
  ack_wait: number; // nanoseconds
  max_ack_pending: number;
  inactive_threshold?: number; // nanoseconds
  metadata: Record<string, string>;
}

/** Topology names every subject, stream, consumer and bucket of one installation. */
export class Topology {
  readonly prefix: string;

  /** @param prefix the subject prefix, "ax" when empty: 1-32 lower-case letters, digits, '_' or '-', starting with a letter. */
  constructor(prefix = "ax") {
    if (prefix === "") prefix = "ax";
    if (!prefixRE.test(prefix)) {
      throw new Error(`subject prefix "${prefix}": use 1-32 lower-case letters, digits, '_' or '-', starting with a letter`);
    }
    this.prefix = prefix;
  }

  private subject(...parts: string[]): string {
    return this.prefix + "." + parts.join(".");
  }

  /** ax.dispatch.<pool>.<priority>.<handler>: a pool's work for one handler. */
  dispatch(pool: string, priority: string, handler: string): string {
    return this.subject("dispatch", pool, priority, handler);
  }
  /** ax.dispatch.worker.<worker_id>: the work routed to one executor. */
  dispatchWorker(workerID: string): string {
    return this.subject("dispatch", WORKER_POOL, workerID);
  }
  /** ax.report.<pool>.<worker_id>.<instance_id>. */
  report(pool: string, workerID: string, instanceID: number): string {
    return this.subject("report", pool, workerID, String(instanceID));
  }
  /** ax.report.<pool>.<worker_id>.batch: a worker's report batches (protocol version 2). */
  reportBatch(pool: string, workerID: string): string {
    return this.subject("report", pool, workerID, "batch");
  }
  /** ax.fence.<pool>.<worker_id>.<instance_id>: where a worker asks whether a redelivered attempt may start. */
  fence(pool: string, workerID: string, instanceID: number): string {
    return this.subject("fence", pool, workerID, String(instanceID));
  }
  /** ax.log.<instance_id>.<worker_id>: the task log lines a worker ships (its credential may publish only its own). */
  log(instanceID: number, workerID: string): string {
    return this.subject("log", String(instanceID), workerID);
  }
  /**
   * The subject that writes the grant key <worker_id>.<pool>.<handler> in
   * ax-workers (streams.GrantKey): the dispatcher lets a worker serve a pool
   * and a handler only when its record names them and this key is there,
   * which only a credential that grants them may write.
   */
  grantSubject(workerID: string, pool: string, handler: string): string {
    return `$KV.${this.workersBucket}.${workerID}.${pool}.${handler}`;
  }
  /** ax.control.<worker_id>: core NATS orders (cancel). */
  control(workerID: string): string {
    return this.subject("control", workerID);
  }
  /** ax.ready.<pool>.>: every doorbell of a pool's queues. */
  readyPool(pool: string): string {
    return this.subject("ready", pool, ">");
  }
  /** ax.ready.worker.<worker_id>: the doorbell of a worker's own queue. */
  readyWorker(workerID: string): string {
    return this.subject("ready", WORKER_POOL, workerID);
  }
  /** The priority and handler a doorbell subject of pool names, or undefined. */
  readyQueue(pool: string, subject: string): { priority: string; handler: string } | undefined {
    const head = this.subject("ready", pool) + ".";
    if (!subject.startsWith(head)) return undefined;
    const rest = subject.slice(head.length);
    const dot = rest.indexOf(".");
    if (dot < 0 || dot === rest.length - 1) return undefined;
    return { priority: rest.slice(0, dot), handler: rest.slice(dot + 1) };
  }

  private stream(name: string): string {
    return this.prefix.toUpperCase() + "_" + name;
  }
  get dispatchStream(): string {
    return this.stream("DISPATCH");
  }
  get reportsStream(): string {
    return this.stream("REPORTS");
  }
  get logsStream(): string {
    return this.stream("LOGS");
  }
  get workersBucket(): string {
    return this.prefix + "-workers";
  }
  get leasesBucket(): string {
    return this.prefix + "-leases";
  }

  /** The durable consumer the executors of pool with handler share for one priority. */
  poolConsumer(pool: string, priority: string, handler: string): ConsumerSettings {
    return {
      durable_name: poolConsumerName(pool, priority, handler),
      description: "AX executors of pool " + pool + " with handler " + handler + ", priority " + priority,
      filter_subject: this.dispatch(pool, priority, handler),
      ack_policy: "explicit",
      ack_wait: DEFAULT_ACK_WAIT_MS * 1e6,
      max_ack_pending: -1,
      metadata: { ax_pool: pool, ax_priority: priority, ax_handler: handler },
    };
  }

  /** The durable consumer of one executor's own subject, "worker_<id>". */
  workerConsumer(workerID: string): ConsumerSettings {
    return {
      durable_name: "worker_" + workerID,
      description: "AX executor " + workerID + ": the work routed to it alone",
      filter_subject: this.dispatchWorker(workerID),
      ack_policy: "explicit",
      ack_wait: DEFAULT_ACK_WAIT_MS * 1e6,
      max_ack_pending: -1,
      inactive_threshold: WORKER_CONSUMER_INACTIVE_MS * 1e6,
      metadata: { ax_worker: workerID },
    };
  }
}

/** leaseKey is the ax-leases key of one attempt: "<instance_id>.<attempt>". */
export function leaseKey(instanceID: number, attempt: number): string {
  return `${instanceID}.${attempt}`;
}

const maxReadableName = 200;

/** poolConsumerName is Go's streams.PoolConsumerName: readable part and FNV-1a 32 hash. */
export function poolConsumerName(pool: string, priority: string, handler: string): string {
  const h = fnv32a(Buffer.from(pool + "\x00" + priority + "\x00" + handler, "utf8"));
  let readable = "pool_" + pool + "_" + priority + "_" + handler.replaceAll(".", "_");
  if (readable.length > maxReadableName) readable = readable.slice(0, maxReadableName);
  return readable + "_" + h.toString(16).padStart(8, "0");
}

function fnv32a(data: Uint8Array): number {
  let h = 0x811c9dc5;
  for (const b of data) {
    h ^= b;
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h >>> 0;
}
