package dispatcher

import (
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// sharedMsg is a trigger message that carries a batch of firings, as each
// of its firings sees it. The firings of a batch may end apart (one held
// until its run_at, the others fired at once; in two dispatcher batches),
// so the message is acknowledged once every one of them has acknowledged
// it, and a Nak or Term of any of them returns (or ends) the whole message
// at once and makes the acknowledgements that follow no-ops: a batch
// redelivered is read again whole, and the firings already made find
// their instances (one per event id) and make nothing new.
type sharedMsg struct {
	jetstream.Msg
	mu     sync.Mutex
	left   int  // the firings yet to acknowledge
	failed bool // a firing returned or ended the message
}

// Ack acknowledges the message once every firing has.
func (m *sharedMsg) Ack() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failed || m.left <= 0 {
		return nil
	}
	if m.left--; m.left > 0 {
		return nil
	}
	return m.Msg.Ack()
}

// fail runs the first Nak or Term of any firing.
func (m *sharedMsg) fail(do func() error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failed || m.left <= 0 {
		return nil
	}
	m.failed = true
	return do()
}

func (m *sharedMsg) Nak() error { return m.fail(m.Msg.Nak) }

func (m *sharedMsg) NakWithDelay(d time.Duration) error {
	return m.fail(func() error { return m.Msg.NakWithDelay(d) })
}

func (m *sharedMsg) Term() error { return m.fail(m.Msg.Term) }

func (m *sharedMsg) TermWithReason(reason string) error {
	return m.fail(func() error { return m.Msg.TermWithReason(reason) })
}
