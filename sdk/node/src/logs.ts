// Task logs: every line a handler logs through ctx.logger is put in a
// bounded buffer and shipped to AX_LOGS on ax.log.<instance_id>.<worker_id>, one
// message per line, without a Nats-Msg-Id (as the Go executor's log
// shipper does, executor/logship.go). A handler's log call never waits on
// NATS; a full buffer drops its oldest line and the attempt's log then
// carries a warning line "N log lines dropped".

import type { JetStreamClient } from "@nats-io/jetstream";

import type { LogLine } from "./schemas.js";
import type { Topology } from "./topology.js";

/** The most lines shipped in one batch, and how many waiting lines ship at once. */
const LOG_BATCH = 500;
/** The longest message shipped as it was written, in characters. */
const MAX_MESSAGE = 16 << 10;

type Level = LogLine["level"];

export class LogShipper {
  private ring: LogLine[] = [];
  private written = 0; // lines ever added
  private shipped = 0; // every line up to this count is published or dropped
  private drops = new Map<string, { line: LogLine; n: number }>();
  private total = 0;
  private timer: NodeJS.Timeout | undefined;
  private shipping: Promise<void> | undefined;
  private again = false;
  private waiters: Array<{ target: number; resolve: () => void }> = [];

  constructor(
    private readonly js: JetStreamClient,
    private readonly topology: Topology,
    private readonly capacity: number,
    private readonly intervalMs: number,
    private readonly onTrouble: (msg: string, fields: Record<string, unknown>) => void,
  ) {}

  /** start ships the buffer every interval until stop. */
  start(): void {
    this.timer = setInterval(() => void this.ship(), this.intervalMs);
  }

  /** stop ships what is left and stops the interval. */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.ship();
  }

  /** dropped is how many lines were lost since the worker started. */
  get dropped(): number {
    return this.total;
  }

  /** add puts a line in the buffer; it never blocks. */
  add(base: Omit<LogLine, "level" | "message" | "time" | "fields">, level: Level, message: string, fields?: Record<string, unknown>): void {
    if (message.length > MAX_MESSAGE) {
      fields = { truncated_from_chars: message.length };
      message = message.slice(0, MAX_MESSAGE) + "…";
    }
    const line: LogLine = { ...base, level, message, time: new Date().toISOString() };
    if (fields !== undefined && Object.keys(fields).length > 0) line.fields = safeFields(fields);
    this.written++;
    if (this.ring.length >= this.capacity) {
      this.drop(this.ring.shift()!);
      this.shipped++;
    }
    this.ring.push(line);
    if (this.ring.length >= LOG_BATCH) void this.ship();
  }

  /** flush resolves once every line added before it was called is shipped or dropped, or after timeoutMs. */
  async flush(timeoutMs: number): Promise<boolean> {
    const target = this.written;
    if (this.shipped >= target) return true;
    let timer: NodeJS.Timeout | undefined;
    const done = new Promise<boolean>((resolve) => {
      this.waiters.push({ target, resolve: () => resolve(true) });
      timer = setTimeout(() => resolve(false), timeoutMs);
    });
    void this.ship();
    const ok = await done;
    clearTimeout(timer);
    return ok;
  }

  private drop(line: LogLine): void {
    const key = `${line.instance_id}.${line.attempt}`;
    const d = this.drops.get(key);
    if (d) {
      d.n++;
      d.line.time = line.time;
    } else {
      this.drops.set(key, { line: { ...line }, n: 1 });
    }
    this.total++;
  }

  private ship(): Promise<void> {
    if (this.shipping) {
      // One shipment at a time: this one goes round again when it is done.
      this.again = true;
      return this.shipping;
    }
    this.shipping = (async () => {
      do {
        this.again = false;
        await this.shipAll();
      } while (this.again);
    })().finally(() => {
      this.shipping = undefined;
      this.wake();
    });
    return this.shipping;
  }

  private async shipAll(): Promise<void> {
    for (;;) {
      const warnings = [...this.drops.values()].map(({ line, n }) => ({
        n,
        line: { ...line, level: "warn" as Level, message: `${n} log lines dropped`, fields: { dropped: n } },
      }));
      this.drops.clear();
      const lines = this.ring.splice(0, LOG_BATCH);
      if (lines.length === 0 && warnings.length === 0) {
        this.shipped = this.written;
        return;
      }
      const all = [...warnings.map((w) => w.line), ...lines];
      const results = await Promise.allSettled(all.map((l) => this.js.publish(this.topology.log(l.instance_id, l.worker_id), JSON.stringify(l), { timeout: 10_000 })));
      let refused = 0;
      results.forEach((r, i) => {
        if (r.status === "fulfilled") return;
        refused++;
        if (i < warnings.length) {
          // Told again with the next batch.
          const w = warnings[i];
          const d = this.drops.get(`${w.line.instance_id}.${w.line.attempt}`);
          if (d) d.n += w.n;
          else this.drops.set(`${w.line.instance_id}.${w.line.attempt}`, { line: w.line, n: w.n });
        } else {
          this.drop(all[i]);
        }
      });
      this.shipped += lines.length;
      this.wake();
      if (refused > 0) {
        this.onTrouble("task log lines lost: NATS refused them (they count as dropped)", { refused });
        return;
      }
      if (lines.length === 0) return;
    }
  }

  private wake(): void {
    this.waiters = this.waiters.filter((w) => {
      if (this.shipped >= w.target) {
        w.resolve();
        return false;
      }
      return true;
    });
  }
}

/** safeFields makes fields JSON-safe: a value JSON.stringify cannot take becomes its String(). */
function safeFields(fields: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(fields)) {
    if (k === "message" || k === "level" || k === "time") continue;
    try {
      out[k] = v instanceof Error ? v.message : JSON.parse(JSON.stringify(v) ?? "null");
    } catch {
      out[k] = String(v);
    }
  }
  return out;
}
