// The names and texts the Node SDK must spell exactly as the Go code does.

import assert from "node:assert/strict";
import { test } from "node:test";

import { goDuration, leaseKey, poolConsumerName, Topology } from "../src/index.js";

test("pool consumer names are Go's streams.PoolConsumerName", () => {
  // As the Go executor of ax dev names them (read from a running server).
  assert.equal(poolConsumerName("default", "normal", "builtin.echo"), "pool_default_normal_builtin_echo_460264b5");
  assert.equal(poolConsumerName("default", "urgent", "builtin.sleep"), "pool_default_urgent_builtin_sleep_0c729091");
  assert.equal(poolConsumerName("default", "low", "builtin.fail"), "pool_default_low_builtin_fail_f814f1ef");
});

test("subjects and keys are the topology's", () => {
  const t = new Topology();
  assert.equal(t.dispatch("default", "normal", "a.b"), "ax.dispatch.default.normal.a.b");
  assert.equal(t.report("gpu", "w1", 42), "ax.report.gpu.w1.42");
  assert.deepEqual(t.readyQueue("default", "ax.ready.default.low.a.b"), { priority: "low", handler: "a.b" });
  assert.equal(t.readyQueue("default", "ax.ready.other.low.a"), undefined);
  assert.equal(leaseKey(7, 2), "7.2");
  assert.throws(() => new Topology("Bad"), /subject prefix "Bad"/);
});

test("durations read as Go's time.Duration.String", () => {
  for (const [ms, want] of [[0, "0s"], [500, "500ms"], [1000, "1s"], [1500, "1.5s"], [2000, "2s"], [90_000, "1m30s"], [3_600_000, "1h0m0s"]] as const) {
    assert.equal(goDuration(ms), want, `goDuration(${ms})`);
  }
});
