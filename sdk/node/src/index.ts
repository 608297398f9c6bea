// @ax-scheduler/executor: run AX task attempts in Node.js. See docs/node-sdk.md.
export { Worker, jsonLogger, DEFAULT_VERSION, PROGRESS_INTERVAL_MS } from "./worker.js";
export type { Context, Handler, HandlerOptions, Level, Logger, WorkerOptions } from "./worker.js";
export { PermanentError, isPermanent, RetryAfterError, retryAfter, TimeoutError, CancelledError, ShutdownError, LeaseLostError, goDuration } from "./errors.js";
export { connectExecutor, devExecutorCredentials, inboxPrefix } from "./connect.js";
export type { ConnectOptions } from "./connect.js";
export { Topology, poolConsumerName, leaseKey, PRIORITIES, DEFAULT_POOL } from "./topology.js";
export type { Dispatch, Report, WorkerRecord, Lease, LogLine, Control, Parent, Progress } from "./schemas.js";
export { MAX_PROGRESS_MESSAGE, checkProgress } from "./schemas.js";
