package storetest

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Statements records the SQL of every statement a pool of [NewCounted]
// sends, alone or in a batch, and the round trips that sent them, for
// tests of how many statements and round trips code makes. It is safe for
// concurrent use.
type Statements struct {
	mu    sync.Mutex
	sql   []string
	trips int
}

// RoundTrips returns how many statements sent alone and batches sent so
// far.
func (s *Statements) RoundTrips() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.trips
}

// Count returns how many statements sent so far hold text.
func (s *Statements) Count(text string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, q := range s.sql {
		if strings.Contains(q, text) {
			n++
		}
	}
	return n
}

// All returns the statements sent so far, in order.
func (s *Statements) All() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.sql...)
}

func (s *Statements) add(sql string, trip bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sql != "" {
		s.sql = append(s.sql, sql)
	}
	if trip {
		s.trips++
	}
}

// TraceQueryStart records a statement sent alone.
func (s *Statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	s.add(data.SQL, true)
	return ctx
}

// TraceQueryEnd does nothing.
func (*Statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart records a round trip.
func (s *Statements) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	s.add("", true)
	return ctx
}

// TraceBatchQuery records a statement sent in a batch.
func (s *Statements) TraceBatchQuery(_ context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	s.add(data.SQL, false)
}

// TraceBatchEnd does nothing.
func (*Statements) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// NewCounted creates a fresh, migrated database for t, as [New] does, and
// returns a pool on it that records every statement it sends. The pool is
// closed when t ends.
func NewCounted(t testing.TB) (*pgxpool.Pool, *Statements) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(URL(t))
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	st := &Statements{}
	cfg.ConnConfig.Tracer = st
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool, st
}
