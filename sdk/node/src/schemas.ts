// The wire messages a worker reads and writes, as in schemas/json/*.schema.json.

/** A parent instance's result, handed to a chained task (dispatch "parents"). */
export interface Parent {
  instance_id: number;
  state: string;
  output?: unknown;
  [field: string]: unknown;
}

/** The version of the executor protocol (docs/executor-protocol.md, "Versions") this SDK speaks. */
export const EXECUTOR_PROTOCOL = 2;

/** Dispatch is the message on ax.dispatch.*: one attempt for an executor to run (dispatch.schema.json). */
export interface Dispatch {
  instance_id: number;
  task: string;
  task_version: number;
  handler: string;
  attempt: number;
  max_attempts: number;
  event_id: string;
  priority: string;
  pool?: string;
  payload?: unknown;
  timeout_ms: number;
  mutex_template?: string;
  fired_at: string;
  dispatched_at: string;
  run_id?: string;
  parents?: Record<string, Parent>;
  shard_index?: number;
  shard_count?: number;
  /** The protocol version the message is written in; absent means 1. */
  protocol?: number;
  /** The dispatchers take report batches (protocol version 2): the final report may go in one. */
  report_batches?: boolean;
  /** The attempt was dispatched before: an earlier message of it may have run, so ask the fence before running it. */
  republished?: boolean;
}

/** FenceAnswer is a dispatcher's reply to a fence question (fence_answer.schema.json). */
export interface FenceAnswer {
  start: boolean;
  reason: string;
}

export type ReportKind = "started" | "progress" | "succeeded" | "failed" | "released";

/** The longest progress message, in bytes of UTF-8. */
export const MAX_PROGRESS_MESSAGE = 256;

/** Progress is how far an attempt has got: done of total units (total 0: unknown), with a short message. */
export interface Progress {
  done: number;
  total: number;
  message?: string;
}

const loneSurrogate = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** checkProgress throws an error saying what is wrong with the values (schemas.Progress.Check in Go). */
export function checkProgress(done: unknown, total: unknown, message: unknown): Progress {
  if (typeof done !== "number" || !Number.isSafeInteger(done) || typeof total !== "number" || !Number.isSafeInteger(total)) {
    throw new Error(`progress ${String(done)} of ${String(total)}: done and total must be integers`);
  }
  if (done < 0 || total < 0) throw new Error(`progress ${done} of ${total}: done and total must not be negative`);
  if (total > 0 && done > total) throw new Error(`progress ${done} of ${total}: done must not exceed total (pass total 0 when it is unknown)`);
  if (typeof message !== "string") throw new Error(`progress message ${String(message)}: must be a string`);
  const size = Buffer.byteLength(message, "utf8");
  if (size > MAX_PROGRESS_MESSAGE) throw new Error(`progress message of ${size} bytes: at most ${MAX_PROGRESS_MESSAGE} bytes are allowed`);
  if (loneSurrogate.test(message)) throw new Error(`progress message ${JSON.stringify(message)} is not valid UTF-8 (it has a lone surrogate)`);
  return message === "" ? { done, total } : { done, total, message };
}

/** Report is an executor's word on one attempt (report.schema.json). */
export interface Report {
  instance_id: number;
  attempt: number;
  worker_id: string;
  kind: ReportKind;
  at: string;
  started_at: string;
  output?: unknown;
  error?: string;
  permanent?: boolean;
  /** On a failure that is not permanent: run the next attempt this many ms after the report, instead of the backoff. */
  retry_after_ms?: number;
  /** The W3C traceparent of the attempt's trace: the dispatcher's span of the recorded report is its child. */
  traceparent?: string;
  /** On a progress report only, and required there: how far the attempt has got. */
  progress?: Progress;
}

/** WorkerRecord is the value of key <worker_id> in ax-workers (worker.schema.json). */
export interface WorkerRecord {
  id: string;
  hostname?: string;
  version: string;
  pools: string[];
  handlers: string[];
  slots: number;
  busy: number;
  started_at: string;
  heartbeat_at: string;
  /** The latest executor protocol version the worker speaks. */
  protocol?: number;
}

/** Lease is the value of key <instance_id>.<attempt> in ax-leases (lease.schema.json). */
export interface Lease {
  instance_id: number;
  attempt: number;
  worker_id: string;
  acquired_at: string;
}

/** LogLine is one task log line on ax.log.<instance_id>.<worker_id> (log_line.schema.json). */
export interface LogLine {
  instance_id: number;
  task: string;
  attempt: number;
  worker_id: string;
  level: "debug" | "info" | "warn" | "error" | "";
  message: string;
  time: string;
  fields?: Record<string, unknown>;
}

/** Control is the core NATS message on ax.control.<worker_id> (control.schema.json). */
export interface Control {
  action: string;
  instance_id: number;
  attempt: number;
  reason: string;
}

const taskRE = /^[a-z0-9][a-z0-9_-]{0,63}$/;
const handlerRE = /^[A-Za-z0-9._-]{1,128}$/;

function positiveInt(v: unknown): v is number {
  return typeof v === "number" && Number.isSafeInteger(v) && v > 0;
}

/**
 * decodeDispatch parses and checks a dispatch message, throwing an error
 * that names the subject and what is wrong.
 */
export function decodeDispatch(subject: string, data: Uint8Array): Dispatch {
  let d: Dispatch;
  try {
    d = JSON.parse(Buffer.from(data).toString("utf8")) as Dispatch;
  } catch (err) {
    throw new Error(`dispatch message on ${subject}: not JSON: ${(err as Error).message}`);
  }
  if (d === null || typeof d !== "object" || Array.isArray(d)) {
    throw new Error(`dispatch message on ${subject}: not a JSON object`);
  }
  const problems: string[] = [];
  if (!positiveInt(d.instance_id)) problems.push("instance_id must be a positive integer");
  if (!positiveInt(d.attempt)) problems.push("attempt must be a positive integer");
  if (!positiveInt(d.max_attempts)) problems.push("max_attempts must be a positive integer");
  if (!positiveInt(d.timeout_ms)) problems.push("timeout_ms must be a positive integer");
  if (typeof d.task !== "string" || !taskRE.test(d.task)) problems.push("task must match " + taskRE.source);
  if (typeof d.handler !== "string" || !handlerRE.test(d.handler)) problems.push("handler must match " + handlerRE.source);
  if (d.pool !== undefined && (typeof d.pool !== "string" || d.pool === "")) problems.push("pool must be a non-empty string");
  if (d.protocol !== undefined && (typeof d.protocol !== "number" || !Number.isSafeInteger(d.protocol) || d.protocol < 0)) problems.push("protocol must be a non-negative integer");
  if (d.report_batches !== undefined && typeof d.report_batches !== "boolean") problems.push("report_batches must be true or false");
  if (d.republished !== undefined && typeof d.republished !== "boolean") problems.push("republished must be true or false");
  if (problems.length > 0) {
    throw new Error(`dispatch message on ${subject}: ${problems.join("; ")}`);
  }
  return d;
}
