package natsauth

import (
	"fmt"
	"strings"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// An Action is one thing a NATS user might try: a publish or a
// subscription on one subject.
type Action struct {
	// What the action does, in words.
	What string
	// Subject is published to, or subscribed to when Subscribe is set.
	Subject   string
	Subscribe bool
}

// Actions lists the actions of the permission matrix for topology top,
// with pool "default" for the pool an executor serves and "gpu" for one
// it does not, and worker "w1" for an executor's own worker id.
func Actions(top streams.Topology) []Action {
	const own, other, worker = schemas.DefaultPool, "gpu", "w1"
	api := "$JS.API."
	d := top.DispatcherConsumer()
	pool := top.PoolConsumer(own, schemas.PriorityNormal, "hello")
	otherPool := top.PoolConsumer(other, schemas.PriorityNormal, "hello")
	return []Action{
		{What: "publish a firing", Subject: top.Trigger("hello")},
		{What: "publish a firing or cancel order as the API (its operator is recorded)", Subject: top.APITrigger("hello")},
		{What: "publish AX's own firing (chain, retry, reroute)", Subject: top.AXTrigger("hello")},
		{What: "publish the one-shot schedule of a delayed firing", Subject: top.SchedFiring("hello", "e1")},
		{What: "publish the one-shot schedule of a retry", Subject: top.Sched("retry-1-2")},
		{What: "route work to a pool", Subject: top.Dispatch(own, schemas.PriorityNormal, "hello")},
		{What: "publish a work-queue stream's keeper (see architecture.md)", Subject: top.Keeper(top.DispatchStream())},
		{What: "publish a report on its pool's work", Subject: top.Report(own, worker, 1)},
		{What: "publish a report on another pool's work", Subject: top.Report(other, worker, 1)},
		{What: "publish a report batch as its worker", Subject: top.ReportBatch(own, worker)},
		{What: "publish a report batch as another worker", Subject: top.ReportBatch(own, "w2")},
		{What: "publish a report batch on another pool's work", Subject: top.ReportBatch(other, worker)},
		{What: "ask whether a redelivered attempt of its pool may start", Subject: top.Fence(own, worker, 1)},
		{What: "ask whether a redelivered attempt of another pool may start", Subject: top.Fence(other, worker, 1)},
		{What: "publish a task log line as its worker", Subject: top.Log(1, worker)},
		{What: "publish a task log line as another worker", Subject: top.Log(1, "w2")},
		{What: "publish an audit record", Subject: top.Audit("hello")},
		{What: "send a worker a control order", Subject: top.Control(worker)},
		{What: "hear its own worker's control orders", Subject: top.Control(worker), Subscribe: true},
		{What: "announce a task change (`$KV." + top.TasksBucket() + "`)", Subject: kvKey(top.TasksBucket(), "hello")},
		{What: "write its worker's heartbeat (`$KV." + top.WorkersBucket() + "`)", Subject: kvKey(top.WorkersBucket(), worker)},
		{What: "write another worker's heartbeat", Subject: kvKey(top.WorkersBucket(), "w2")},
		{What: "write a grant key of its credential (its pool and handler)", Subject: top.GrantSubject(worker, own, "hello")},
		{What: "write a grant key its credential lacks (another pool)", Subject: top.GrantSubject(worker, other, "hello")},
		{What: "write a lease (`$KV." + top.LeasesBucket() + "`)", Subject: kvKey(top.LeasesBucket(), "1")},
		{What: "pull firings from the dispatcher's consumer", Subject: api + "CONSUMER.MSG.NEXT." + top.TriggersStream() + "." + d.Durable},
		{What: "pull AX's own firings from the dispatcher's consumer", Subject: api + "CONSUMER.MSG.NEXT." + top.FiringsStream() + "." + top.FiringsConsumer().Durable},
		{What: "pull reports from the recorder's consumer", Subject: api + "CONSUMER.MSG.NEXT." + top.ReportsStream() + "." + top.RecorderConsumer().Durable},
		{What: "pull its pool's work", Subject: api + "CONSUMER.MSG.NEXT." + top.DispatchStream() + "." + pool.Durable},
		{What: "pull another pool's work", Subject: api + "CONSUMER.MSG.NEXT." + top.DispatchStream() + "." + otherPool.Durable},
		{What: "read the state of another pool's consumer", Subject: api + "CONSUMER.INFO." + top.DispatchStream() + "." + otherPool.Durable},
		{What: "acknowledge another pool's work", Subject: "$JS.ACK." + top.DispatchStream() + "." + otherPool.Durable + ".1.1.1.1.0"},
		{What: "pull another handler's work of its pool", Subject: api + "CONSUMER.MSG.NEXT." + top.DispatchStream() + "." + top.PoolConsumer(own, schemas.PriorityNormal, "other").Durable},
		{What: "pull another worker's own work", Subject: api + "CONSUMER.MSG.NEXT." + top.DispatchStream() + "." + top.WorkerConsumer("w2").Durable},
		{What: "make or change its pool's consumer", Subject: api + "CONSUMER.CREATE." + top.DispatchStream() + "." + pool.Durable + "." + pool.FilterSubject},
		{What: "make or change another pool's consumer", Subject: api + "CONSUMER.CREATE." + top.DispatchStream() + "." + otherPool.Durable + "." + otherPool.FilterSubject},
		{What: "read a dispatch message by sequence", Subject: api + "STREAM.MSG.GET." + top.DispatchStream()},
		{What: "read a pending schedule by subject", Subject: api + "STREAM.MSG.GET." + top.FiringsStream()},
		{What: "read the task logs through a consumer of its own", Subject: api + "CONSUMER.CREATE." + top.LogsStream() + ".c1." + top.Log(1, worker)},
		{What: "change the dispatcher's consumer", Subject: api + "CONSUMER.CREATE." + top.TriggersStream() + "." + d.Durable + "." + d.FilterSubject},
		{What: "delete the dispatcher's consumer", Subject: api + "CONSUMER.DELETE." + top.TriggersStream() + "." + d.Durable},
		{What: "delete the recorder's consumer", Subject: api + "CONSUMER.DELETE." + top.ReportsStream() + "." + top.RecorderConsumer().Durable},
		{What: "delete a pool's consumer", Subject: api + "CONSUMER.DELETE." + top.DispatchStream() + "." + pool.Durable},
		{What: "read the state of a stream", Subject: api + "STREAM.INFO." + top.DispatchStream()},
		{What: "create a stream", Subject: api + "STREAM.CREATE." + top.LogsStream()},
		{What: "update or seal a stream", Subject: api + "STREAM.UPDATE." + top.AuditStream()},
		{What: "purge a stream", Subject: api + "STREAM.PURGE." + top.AuditStream()},
		{What: "delete a message of a stream", Subject: api + "STREAM.MSG.DELETE." + top.AuditStream()},
		{What: "delete a stream", Subject: api + "STREAM.DELETE." + top.LogsStream()},
		{What: "read replies sent to another user's inbox", Subject: "_INBOX_dispatcher.x", Subscribe: true},
	}
}

// Allowed reports whether permissions p let a user take action a; nil
// permissions allow everything.
func Allowed(p *server.Permissions, a Action) bool {
	if p == nil {
		return true
	}
	allow := p.Publish
	if a.Subscribe {
		allow = p.Subscribe
	}
	if allow == nil {
		return false
	}
	for _, pattern := range allow.Allow {
		if matches(pattern, a.Subject) {
			return true
		}
	}
	return false
}

// matches reports whether the literal subject matches pattern, a subject
// with NATS wildcards ("*" one token, ">" the rest).
func matches(pattern, subject string) bool {
	p, s := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, tok := range p {
		switch {
		case tok == ">":
			return len(s) > i
		case i >= len(s):
			return false
		case tok != "*" && tok != s[i]:
			return false
		}
	}
	return len(p) == len(s)
}

// MatrixScope is the executor's scope in [Matrix]: the pool "default",
// the worker "w1" and the handler "hello", as every executor credential AX
// makes names its pools, worker and handlers (see [Scope.Check]).
var MatrixScope = Scope{Pools: []string{schemas.DefaultPool}, WorkerID: "w1", Handlers: []string{"hello"}}

// Matrix renders, as a Markdown table, which role may take which action of
// [Actions] in topology top, with an executor of [MatrixScope].
func Matrix(top streams.Topology) string {
	var b strings.Builder
	b.WriteString("| action | subject |")
	for _, role := range Roles {
		fmt.Fprintf(&b, " %s |", role)
	}
	b.WriteString("\n|---|---|")
	for range Roles {
		b.WriteString(":-:|")
	}
	b.WriteString("\n")
	perms := make([]*server.Permissions, len(Roles))
	for i, role := range Roles {
		perms[i] = Permissions(top, role, string(role), MatrixScope)
	}
	for _, a := range Actions(top) {
		verb := "pub"
		if a.Subscribe {
			verb = "sub"
		}
		fmt.Fprintf(&b, "| %s | %s `%s` |", a.What, verb, a.Subject)
		for i := range Roles {
			cell := "—"
			if Allowed(perms[i], a) {
				cell = "yes"
			}
			fmt.Fprintf(&b, " %s |", cell)
		}
		b.WriteString("\n")
	}
	return b.String()
}
