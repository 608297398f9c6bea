// Package fencepg lets a handler's writes to PostgreSQL refuse a stale
// attempt: each write runs in a transaction that first raises the fence of
// the resource it writes to the attempt's fencing token
// ([executor.Job.Fence]), and finds the fence higher when a newer attempt
// has written — a worker paused past its lease, resumed after the retry
// committed, then writes nothing.
//
// The fences live in one small table of the user's database (see
// [Schema]); a resource is any name the handler picks for what it
// writes: the instance ("settlement/" + event id), an account, the task's
// mutex key. The pattern, for a table of one's own instead, is
//
//	UPDATE t SET …, fence = $token WHERE key = $key AND fence <= $token
//
// and zero rows updated means a newer attempt wrote first.
//
// The fence's row is locked until the transaction ends, so two attempts
// writing to one resource are serialized; the stale one, once the newer
// has committed, is refused with [ErrStale]. A write that commits before
// the newer attempt's first fenced write is not stale for the store: it
// lands first and the newer attempt's write follows it.
package fencepg

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Schema creates the table of the fences if it is missing. [Ensure] runs it.
const Schema = `CREATE TABLE IF NOT EXISTS ax_fences (
	resource   text PRIMARY KEY,
	fence      bigint NOT NULL,
	written_at timestamptz NOT NULL DEFAULT now()
)`

// ErrStale is the error of a write refused because a newer attempt has
// written to the resource: the attempt should end without retrying
// (wrap it with executor.Permanent, or let the handler return it: its
// report is fenced out by the newer attempt anyway).
var ErrStale = errors.New("fenced out: a newer attempt has written to the resource")

// Beginner starts a transaction: a *pgx.Conn, a *pgxpool.Pool or a
// pgx.Tx (a savepoint) is one.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Querier runs a statement that returns a row: a pgx.Tx is one.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Execer runs a statement: a *pgx.Conn, a *pgxpool.Pool or a pgx.Tx is one.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Ensure creates the fences table if it is missing.
func Ensure(ctx context.Context, db Execer) error {
	if _, err := db.Exec(ctx, Schema); err != nil {
		return fmt.Errorf("create ax_fences: %w", err)
	}
	return nil
}

// Raise raises the fence of resource to token inside tx, or returns
// [ErrStale] when the fence is above token already (a newer attempt
// wrote). A fence equal to token passes: one attempt may write many
// times. Call it before the transaction's writes; its row lock holds
// until tx ends.
func Raise(ctx context.Context, tx Querier, resource string, token uint64) error {
	if token == 0 {
		return errors.New("fence " + resource + ": token 0: the attempt has no fencing token (a Job no worker made)")
	}
	var got int64
	err := tx.QueryRow(ctx, `INSERT INTO ax_fences (resource, fence) VALUES ($1, $2)
		ON CONFLICT (resource) DO UPDATE SET fence = EXCLUDED.fence, written_at = now()
		WHERE ax_fences.fence <= EXCLUDED.fence
		RETURNING fence`, resource, int64(token)).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("fence %s at %d: %w", resource, token, ErrStale)
	}
	if err != nil {
		return fmt.Errorf("fence %s at %d: %w", resource, token, err)
	}
	return nil
}

// Write runs fn in a transaction of db whose first statement raises the
// fence of resource to token ([Raise]), and commits it: fn's writes
// commit only if no newer attempt has written to resource. It returns
// [ErrStale] (wrapped) when one has, having written nothing.
func Write(ctx context.Context, db Beginner, resource string, token uint64, fn func(pgx.Tx) error) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("fence %s: begin: %w", resource, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := Raise(ctx, tx, resource, token); err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("fence %s: commit: %w", resource, err)
	}
	return nil
}
