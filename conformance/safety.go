package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/drill"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// The safety checks hold the rules that stop an attempt running twice,
// which a worker can break while every outcome the other checks see is
// right: the lease taken create-only, the ack's confirmation awaited, the
// fence asked on a redelivery, the log lines shipped before the final
// report. The kit watches them on the wire and injects the redelivery.

// safetySubjects are the subjects the observer also records for the
// safety checks: the acks of the dispatch stream's messages, the pool's
// fence questions, the log lines and the dispatch messages.
func safetySubjects(top streams.Topology, pool string) []string {
	return []string{"$JS.ACK." + top.DispatchStream() + ".>", top.Fences(pool, "*"),
		top.Prefix() + ".log.>", top.Prefix() + ".dispatch.>"}
}

// checkCreateOnly checks that the first write of each attempt's lease was
// a create: it carried Nats-Expected-Last-Subject-Sequence 0, so that a
// key another worker holds (or whose expiry marker the bucket keeps)
// refuses it. A plain put takes a lease another worker holds.
func (k *kit) checkCreateOnly(ids []int64) {
	var problems []string
	n := 0
	for _, id := range ids {
		for a := 1; a <= maxAttempts; a++ {
			_, writes := k.obs.leaseWrites(id, a)
			for _, s := range writes {
				if s.op != "" {
					continue
				}
				n++
				if got := s.header.Get(jetstream.ExpectedLastSubjSeqHeader); got != "0" {
					problems = append(problems, fmt.Sprintf("instance %d attempt %d: lease written with %s %q, not a create (a plain put overwrites another worker's lease)",
						id, a, jetstream.ExpectedLastSubjSeqHeader, got))
				}
				break
			}
		}
	}
	k.report.Expect("lease: taken create-only",
		"the first write of each lease is a create: header "+jetstream.ExpectedLastSubjSeqHeader+": 0",
		orOK(problems, fmt.Sprintf("%d leases created", n)), len(problems) == 0 && n > 0)
}

// checkAcksConfirmed checks that every ack of a dispatch message asked for
// the server's confirmation (a double ack: +ACK with a reply subject),
// without which a worker cannot know the message will not come again.
func (k *kit) checkAcksConfirmed() {
	var problems []string
	n := 0
	// The acks of the pool's consumers and of the workers' own: those of
	// other pools' workers are not the kit's business.
	consumers := map[string]bool{}
	for _, p := range schemas.Priorities {
		for _, h := range k.handlerNames() {
			consumers[k.opts.Topology.PoolConsumer(k.opts.Pool, p, h).Durable] = true
		}
	}
	for id := range k.keys {
		consumers[k.opts.Topology.WorkerConsumer(id).Durable] = true
	}
	prefix := "$JS.ACK." + k.opts.Topology.DispatchStream() + "."
	for _, s := range k.obs.snapshot() {
		rest, ok := strings.CutPrefix(s.subject, prefix)
		consumer, _, _ := strings.Cut(rest, ".")
		if !ok || !consumers[consumer] || string(s.data) != "+ACK" {
			continue
		}
		n++
		if s.reply == "" {
			problems = append(problems, fmt.Sprintf("ack on %s without a reply subject: the server's confirmation was not asked for", s.subject))
		}
	}
	k.report.Expect("ack: confirmation awaited",
		"each dispatch message acknowledged with +ACK and a reply subject (a double ack), the server's answer awaited before the attempt runs",
		orOK(problems, fmt.Sprintf("%d acks asked for confirmation", n)), len(problems) == 0 && n > 0)
}

// checkLogsBeforeFinal checks that the log lines of the log attempt were
// on the wire before its final report: whoever sees the instance end
// finds its logs.
func (k *kit) checkLogsBeforeFinal(inst schemas.Instance) {
	final := -1
	for _, w := range k.obs.reports(inst.ID) {
		if w.err == nil && w.r.Kind.IsFinal() {
			final = w.idx
			break
		}
	}
	logPrefix := k.opts.Topology.Prefix() + ".log." + strconv.FormatInt(inst.ID, 10) + "."
	before, after := 0, 0
	for i, s := range k.obs.snapshot() {
		if !strings.HasPrefix(s.subject, logPrefix) {
			continue
		}
		if final < 0 || i < final {
			before++
		} else {
			after++
		}
	}
	k.report.Expect("logs: flushed before the final report",
		fmt.Sprintf("the %d log lines of instance %d published before its final report", logLines, inst.ID),
		fmt.Sprintf("%d before, %d after the final report", before, after), final >= 0 && before >= logLines && after == 0)
}

// checkFence injects a redelivery: it publishes again the dispatch
// message of an echo attempt that ran, marked republished, as the
// dispatcher does when it cannot tell whether an earlier message ran,
// and checks that the worker asked the fence about it, and that the
// attempt was not run again. A worker that relies on its lease alone
// runs such a message again once the lease key is gone.
func (k *kit) checkFence(ctx context.Context) error {
	const name = "fence: asked on a redelivery"
	expected := "a dispatch message delivered again or marked republished: a fence question on " +
		k.opts.Topology.Fences(k.opts.Pool, "<worker>") + " before the lease, and no second run"
	id, err := k.fire(ctx, Echo, json.RawMessage(`"redelivered"`))
	if err != nil {
		return err
	}
	inst, err := k.waitEnd(ctx, id)
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		k.report.Expect(name, expected, "not checked: "+err.Error(), false)
		return nil
	}
	k.report.Fact("instance redelivered", id)
	orig, ok := k.obs.dispatchOf(id, inst.Attempt)
	if !ok {
		k.report.Add(drill.Check{Name: name, Expected: expected, Info: true,
			Observed: "not checked: the kit saw no dispatch message of instance " + strconv.FormatInt(id, 10) + " (its NATS user may subscribe to " + k.opts.Topology.Prefix() + ".dispatch.>?)"})
		return nil
	}
	var body map[string]any
	if err := json.Unmarshal(orig.data, &body); err != nil {
		return fmt.Errorf("conformance: dispatch message of instance %d: %w", id, err)
	}
	body["republished"] = true
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	msg := nats.NewMsg(orig.subject)
	for h, v := range orig.header {
		msg.Header[h] = v
	}
	msg.Header.Set(streams.HeaderMsgID, fmt.Sprintf("%d-%d-conformance-redelivery", id, inst.Attempt))
	msg.Data = data
	js, err := jetstream.New(k.opts.Conn)
	if err != nil {
		return err
	}
	injected := len(k.obs.snapshot())
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		k.report.Expect(name, expected, "could not publish the redelivery: "+err.Error(), false)
		return nil
	}
	asked := false
	_ = k.within(ctx, 2*k.opts.Grace, func() (bool, error) {
		asked = k.obs.fenceAsked(id, inst.Attempt, injected)
		return asked, nil
	})
	finals := 0
	for _, w := range k.obs.reports(id) {
		if w.err == nil && w.r.Attempt == inst.Attempt && w.r.Kind.IsFinal() {
			finals++
		}
	}
	k.report.Expect(name, expected, fmt.Sprintf("fence asked: %v; final reports of the attempt: %d", asked, finals), asked && finals == 1)
	return nil
}

// dispatchOf returns the first dispatch message of the attempt seen.
func (o *observer) dispatchOf(id int64, attempt int) (seen, bool) {
	prefix := o.top.Prefix() + ".dispatch."
	for _, s := range o.snapshot() {
		if !strings.HasPrefix(s.subject, prefix) {
			continue
		}
		var d schemas.Dispatch
		if json.Unmarshal(s.data, &d) == nil && d.InstanceID == id && d.Attempt == attempt {
			return s, true
		}
	}
	return seen{}, false
}

// fenceAsked reports whether a fence question on the attempt was seen
// after the log's place from.
func (o *observer) fenceAsked(id int64, attempt int, from int) bool {
	log := o.snapshot()
	for _, s := range log[min(from, len(log)):] {
		if _, _, inst, ok := o.top.FenceFrom(s.subject); !ok || inst != id {
			continue
		}
		var q schemas.FenceQuestion
		if json.Unmarshal(s.data, &q) == nil && q.InstanceID == id && q.Attempt == attempt {
			return true
		}
	}
	return false
}
