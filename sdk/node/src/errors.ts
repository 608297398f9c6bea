/**
 * PermanentError fails an attempt without retry: the instance gets no
 * other attempt, whatever its retry policy says. Throw it from a handler
 * (or wrap another error: `new PermanentError("bad input", { cause: err })`).
 */
export class PermanentError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "PermanentError";
  }
}

/** isPermanent reports whether err, or an error in its cause chain, is a PermanentError. */
export function isPermanent(err: unknown): boolean {
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 32; e = e.cause, depth++) {
    if (e instanceof PermanentError) return true;
  }
  return false;
}

/**
 * RetryAfterError asks for the next attempt delayMs from now instead of
 * after the task's backoff (the Go SDK's executor.RetryAfter): for work that
 * cannot run yet and knows when it can. The attempt fails with its message
 * and counts as one of the task's retry.max_attempts; the dispatcher caps
 * the wait at the task's retry.max_interval_sec. A PermanentError anywhere
 * in the cause chain still fails without retry.
 */
export class RetryAfterError extends Error {
  readonly delayMs: number;
  constructor(delayMs: number, message?: string, options?: { cause?: unknown }) {
    const d = Number.isFinite(delayMs) && delayMs > 0 ? delayMs : 0;
    super(message ?? `retry in ${goDuration(d)} requested`, options);
    this.name = "RetryAfterError";
    this.delayMs = d;
  }
}

/** retryAfter returns the wait the outermost RetryAfterError in err's cause chain asks for, or undefined. */
export function retryAfter(err: unknown): number | undefined {
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 32; e = e.cause, depth++) {
    if (e instanceof RetryAfterError) return e.delayMs;
  }
  return undefined;
}

/** The reason an attempt's signal aborts at its deadline. */
export class TimeoutError extends Error {
  constructor(readonly timeoutMs: number) {
    super("timeout after " + goDuration(timeoutMs));
    this.name = "TimeoutError";
  }
}

/** The reason an attempt's signal aborts when the dispatcher or an operator cancels it. */
export class CancelledError extends Error {
  constructor(readonly reason: string) {
    super(reason === "" ? "cancelled" : "cancelled: " + reason);
    this.name = "CancelledError";
  }
}

/** The reason an attempt's signal aborts when the worker stops and its grace has passed. */
export class ShutdownError extends Error {
  constructor() {
    super("worker shutting down");
    this.name = "ShutdownError";
  }
}

/**
 * The reason an attempt's signal aborts when its lease expired before the
 * worker renewed it: the dispatcher has moved on, and the attempt is not reported.
 */
export class LeaseLostError extends Error {
  constructor() {
    super("lease lost: the attempt's lease expired before the worker renewed it");
    this.name = "LeaseLostError";
  }
}

/**
 * goDuration formats ms as Go's time.Duration.String does ("500ms", "2s",
 * "1m30s", "1h0m0s"), so that a Node worker's errors read like a Go worker's.
 */
export function goDuration(ms: number): string {
  if (ms === 0) return "0s";
  const neg = ms < 0;
  ms = Math.abs(ms);
  let out: string;
  if (ms < 1000) {
    out = trimFraction(ms.toFixed(3)) + "ms";
  } else {
    const h = Math.floor(ms / 3_600_000);
    const m = Math.floor((ms % 3_600_000) / 60_000);
    const s = trimFraction(((ms % 60_000) / 1000).toFixed(3)) + "s";
    out = h > 0 ? `${h}h${m}m${s}` : m > 0 ? `${m}m${s}` : s;
  }
  return neg ? "-" + out : out;
}

function trimFraction(s: string): string {
  return s.includes(".") ? s.replace(/0+$/, "").replace(/\.$/, "") : s;
}
