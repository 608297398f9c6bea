// The worker's span of an attempt (executor/trace.go): ax.executor.run, a
// consumer span, child of the dispatcher's span that routed the attempt
// (the dispatch message's traceparent header), from the handler's start to
// the final report. The handler runs in its OpenTelemetry context, so the
// spans it makes (and those of the instrumented clients it calls) join the
// firing's trace, and the final report names it, so that the dispatcher's
// span of the recorded report is its child. Only the OpenTelemetry API is
// used: the spans go to the tracer provider the application registers (an
// OpenTelemetry SDK), nowhere without one; the trace context passes on
// either way.

import { createTraceState, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, TraceFlags, type Context, type Span, type SpanContext } from "@opentelemetry/api";

import type { Dispatch, Report } from "./schemas.js";
import { DEFAULT_POOL } from "./topology.js";

/** The instrumentation scope of the worker's spans. */
const TRACER_NAME = "@ax-scheduler/executor";

// traceparent: version-traceid-spanid-flags (W3C Trace Context); a later
// version may append fields, version 00 may not, ff is invalid.
const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;

/** The trace headers a dispatch message carried, and its subject. */
export interface DispatchTrace {
  subject: string;
  traceparent?: string;
  tracestate?: string;
}

/** An attempt's span and the context the handler runs in (the span's). */
export interface RunSpan {
  span: Span;
  context: Context;
  ended?: boolean;
}

/**
 * remoteParent returns the context of the remote span that traceparent
 * and tracestate name, or the root context when traceparent is absent or
 * not a valid one.
 */
export function remoteParent(traceparent?: string, tracestate?: string): Context {
  const m = traceparent === undefined ? null : TRACEPARENT.exec(traceparent.trim());
  if (!m || m[1] === "ff" || (m[1] === "00" && m[5] !== undefined)) return ROOT_CONTEXT;
  const sc: SpanContext = {
    traceId: m[2], spanId: m[3], traceFlags: parseInt(m[4], 16) & TraceFlags.SAMPLED, isRemote: true,
    traceState: tracestate ? createTraceState(tracestate) : undefined,
  };
  return trace.isSpanContextValid(sc) ? trace.setSpanContext(ROOT_CONTEXT, sc) : ROOT_CONTEXT;
}

/** startRun starts the span of the attempt of dispatch d, which the worker workerId runs from started. */
export function startRun(d: Dispatch, t: DispatchTrace | undefined, workerId: string, started: Date): RunSpan {
  const parent = remoteParent(t?.traceparent, t?.tracestate);
  const span = trace.getTracer(TRACER_NAME).startSpan("ax.executor.run", { kind: SpanKind.CONSUMER, startTime: started }, parent);
  // Attributes only for a span that records them.
  if (span.isRecording()) {
    span.setAttributes({
      "ax.task": d.task,
      "ax.instance_id": d.instance_id,
      "ax.attempt": d.attempt,
      "ax.pool": d.pool || DEFAULT_POOL,
      "ax.handler": d.handler,
      "ax.worker_id": workerId,
      "messaging.system": "nats",
    });
    if (t) span.setAttribute("messaging.destination.name", t.subject);
  }
  return { span, context: trace.setSpan(parent, span) };
}

/**
 * endRun records the outcome of the attempt's final report rep on its span
 * (the handler's error err), or, with no report, why none went; and ends it.
 * A span ends once: a second call does nothing.
 */
export function endRun(run: RunSpan, rep: Report | undefined, err: unknown, unreported?: string): void {
  if (run.ended) return;
  run.ended = true;
  const { span } = run;
  if (span.isRecording()) {
    if (rep) span.setAttribute("ax.outcome", rep.kind);
    if (rep?.permanent) span.setAttribute("ax.permanent", true);
    if (err instanceof Error) span.recordException(err);
    if (unreported !== undefined) span.setStatus({ code: SpanStatusCode.ERROR, message: unreported });
    else if (rep && rep.kind !== "succeeded") span.setStatus({ code: SpanStatusCode.ERROR, message: rep.error });
  }
  span.end();
}

/** traceparentOf returns the traceparent header value of span, undefined when its span context is not valid. */
export function traceparentOf(span: Span): string | undefined {
  const sc = span.spanContext();
  if (!trace.isSpanContextValid(sc)) return undefined;
  return `00-${sc.traceId}-${sc.spanId}-${(sc.traceFlags & 0xff).toString(16).padStart(2, "0")}`;
}
