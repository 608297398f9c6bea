package dispatcher

import (
	"sync"
	"time"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
)

// maxCachedTasks bounds the tasks a dispatcher keeps: past it, the cache
// starts again empty.
const maxCachedTasks = 1024

// cachedTaskTTL is how long a record is kept before it is read again
// whether or not its task changed: a stamp (a transaction id) is unique
// only until the server's transaction ids wrap around, days at the least.
const cachedTaskTTL = time.Minute

// taskCache keeps the tasks the dispatcher has read, each with its
// definition with defaults, so that a batch of firings reads from
// PostgreSQL only the tasks it has not met before: a round trip less on
// every firing's way to its instance. A record is kept as it was read and
// never trusted beyond that: the instances made from it carry its stamp
// (store.NewInstance.TaskStamp), and the creation statement refuses them
// once the task's row has changed — a new definition, a pause, a disable,
// shadow mode, a delete — whereupon the batch drops the records and makes
// its instances anew from the tasks as they are (see [firingBatch.run]).
type taskCache struct {
	mu    sync.Mutex
	tasks map[string]cachedTask
	now   func() time.Time // time.Now; a test's clock
}

// cachedTask is a task's record and its definition with defaults; neither
// is changed once cached (batches share them).
type cachedTask struct {
	rec    store.TaskRecord
	def    *schemas.Task
	readAt time.Time
}

func newTaskCache() *taskCache { return &taskCache{tasks: make(map[string]cachedTask), now: time.Now} }

// get puts the cached tasks of names into recs and defs, and returns the
// names it does not hold.
func (c *taskCache) get(names []string, recs map[string]store.TaskRecord, defs map[string]*schemas.Task) (missing []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	for _, name := range names {
		t, ok := c.tasks[name]
		if !ok || now.Sub(t.readAt) >= cachedTaskTTL {
			missing = append(missing, name)
			continue
		}
		recs[name], defs[name] = t.rec, t.def
	}
	return missing
}

// put keeps the records read and puts them, with their definitions with
// defaults, into recs and defs.
func (c *taskCache) put(read map[string]store.TaskRecord, recs map[string]store.TaskRecord, defs map[string]*schemas.Task) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.tasks)+len(read) > maxCachedTasks {
		clear(c.tasks)
	}
	now := c.now()
	for name, rec := range read {
		t := cachedTask{rec: rec, def: rec.Definition.WithDefaults(), readAt: now}
		c.tasks[name] = t
		recs[name], defs[name] = t.rec, t.def
	}
}

// drop forgets the tasks of names.
func (c *taskCache) drop(names []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, name := range names {
		delete(c.tasks, name)
	}
}
