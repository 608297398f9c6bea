// Package handlers holds the handlers that the task definitions of
// examples/ name and that no executor of AX serves: cache.flush,
// shops.sync, backup.disk, orders.enrich, search.rebuild and
// settlement.daily; and those of the drill examples (examples/drill-*.yaml,
// see [DrillNames]), which show what ax drill task passes and fails. They
// stand in for real work (they log what they would do and return a small
// output), so that every example runs as shipped with the example executor
// (examples/executor) beside ax dev; ax drill task links them too.
package handlers

import (
	"context"
	"fmt"
	"time"

	"github.com/ax-scheduler/ax/executor"
)

// Names are the handler names [Register] registers.
var Names = []string{"cache.flush", "shops.sync", "backup.disk", "orders.enrich", "search.rebuild", "settlement.daily"}

// Register registers the example handlers on m, with the limits that
// examples/isolation.yaml describes for shops.sync. It panics when a name
// is taken.
func Register(m *executor.Mux) {
	m.HandleFunc("cache.flush", flushCache)
	m.Handle("shops.sync", executor.JSON(syncShop), executor.Concurrency(4), executor.RateLimit(10, 5))
	m.HandleFunc("backup.disk", backupDisk)
	m.Handle("orders.enrich", executor.JSON(enrichOrder))
	m.HandleFunc("search.rebuild", rebuildIndex)
	m.HandleFunc("settlement.daily", settleDay)
	registerDrill(m)
	RegisterConformance(m, ConformancePrefix)
}

// flushCache is examples/broadcast.yaml's handler: each executor of the
// pool flushes its own cache.
func flushCache(ctx context.Context, t *executor.Job) (any, error) {
	executor.Logger(ctx).Info("cache flushed")
	return map[string]any{"worker_id": t.WorkerID, "flushed": true}, nil
}

type shop struct {
	ShopID int64 `json:"shop_id"`
}

// syncShop is examples/isolation.yaml's handler; the task's mutex key keeps
// two syncs of one shop apart. The invoice step runs once per shop and day,
// however often the attempt is retried.
func syncShop(ctx context.Context, t *executor.Job, p shop) (any, error) {
	day := t.FiredAt.UTC().Format(time.DateOnly)
	err := executor.Once(ctx, fmt.Sprintf("shop-%d-invoice-%s", p.ShopID, day), func(ctx context.Context) error {
		executor.Logger(ctx).Info("invoice sent", "shop_id", p.ShopID, "day", day)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return map[string]any{"shop_id": p.ShopID, "synced": true}, nil
}

// backupDisk is examples/pinned-worker.yaml's handler, run only by the
// worker the task names.
func backupDisk(ctx context.Context, t *executor.Job) (any, error) {
	executor.Logger(ctx).Info("backup written")
	return map[string]any{"worker_id": t.WorkerID, "backup": "backup-" + t.FiredAt.UTC().Format("20060102")}, nil
}

type order struct {
	CustomerID int64 `json:"customer_id"`
	OrderID    int64 `json:"order_id,omitempty"`
}

// enrichOrder is examples/routing.yaml's handler: the orders of one
// customer reach one worker, which would keep that customer's profile cached.
func enrichOrder(ctx context.Context, t *executor.Job, p order) (any, error) {
	if p.CustomerID <= 0 {
		return nil, executor.Permanent(fmt.Errorf(`orders.enrich: the payload needs "customer_id", a number above 0, e.g. {"customer_id": 7}`))
	}
	executor.Logger(ctx).Info("order enriched", "customer_id", p.CustomerID)
	return map[string]any{"customer_id": p.CustomerID, "order_id": p.OrderID, "worker_id": t.WorkerID}, nil
}

// rebuildIndex is examples/shards.yaml's handler: each shard rebuilds its
// share of the index.
func rebuildIndex(ctx context.Context, t *executor.Job) (any, error) {
	executor.Logger(ctx).Info("shard rebuilt", "shard", t.ShardIndex, "of", t.ShardCount)
	return map[string]any{"shard": t.ShardIndex, "of": t.ShardCount}, nil
}

// shanghai is Asia/Shanghai, which has kept UTC+8 all year since 1991.
var shanghai = time.FixedZone("CST", 8*60*60)

// settleDay is examples/design-task.json's handler: it settles the day
// before the firing, in the zone of the task's cron trigger.
func settleDay(ctx context.Context, t *executor.Job) (any, error) {
	day := t.FiredAt.In(shanghai).AddDate(0, 0, -1).Format(time.DateOnly)
	executor.Logger(ctx).Info("day settled", "day", day)
	return map[string]any{"settled_day": day}, nil
}
