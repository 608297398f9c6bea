package executor_test

import (
	"context"
	"fmt"

	"github.com/ax-scheduler/ax/executor"
)

// A sharded task (execution.shards: N) runs its handler once per shard, each
// on its own child instance: the handler takes its share of the work by
// ShardIndex and ShardCount.
func ExampleTask_shards() {
	accounts := []string{"a-1", "a-2", "a-3", "a-4", "a-5", "a-6", "a-7"}
	rebuild := executor.HandlerFunc(func(ctx context.Context, t *executor.Job) (any, error) {
		count := max(t.ShardCount, 1) // 0 when the task is not sharded: all the work
		var mine []string
		for i, a := range accounts {
			if i%count == t.ShardIndex {
				mine = append(mine, a)
			}
		}
		return mine, nil
	})

	// Outside a worker, the shard is set by hand, as the dispatcher would.
	for i := range 3 {
		out, _ := rebuild.HandleTask(context.Background(), &executor.Job{Name: "rebuild-index", ShardIndex: i, ShardCount: 3})
		fmt.Println(i, out)
	}
	// Output:
	// 0 [a-1 a-4 a-7]
	// 1 [a-2 a-5]
	// 2 [a-3 a-6]
}
