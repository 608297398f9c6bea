package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// sessionLock is a connection of its own holding a session advisory lock:
// while the connection lives, no other session can take the lock; when it
// dies, PostgreSQL releases the lock and another process may take over.
// It is not safe for concurrent use.
type sessionLock struct {
	conn *pgx.Conn
	key  int64
	what string
}

// acquireSessionLock opens a connection with the settings of the store's
// pool and takes the advisory lock key on it without waiting; it returns
// an error wrapping held when another session holds it.
func (s *Store) acquireSessionLock(ctx context.Context, key int64, what string, held error) (sessionLock, error) {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return sessionLock{}, fmt.Errorf("acquire %s: connect: %w", what, err)
	}
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&ok); err != nil || !ok {
		_ = conn.Close(context.WithoutCancel(ctx))
		if err == nil {
			err = held
		}
		return sessionLock{}, fmt.Errorf("acquire %s: %w", what, err)
	}
	return sessionLock{conn: conn, key: key, what: what}, nil
}

// Check returns an error when the lock's session is gone, and with it the lock.
func (l *sessionLock) Check(ctx context.Context) error {
	if err := l.conn.Ping(ctx); err != nil {
		return fmt.Errorf("check %s: %w", l.what, err)
	}
	return nil
}

// Close releases the lock and closes its connection. The lock is released
// explicitly first: a closed connection's lock is released only when the
// server notices, which a new leader could race.
func (l *sessionLock) Close(ctx context.Context) error {
	_, unlockErr := l.conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, l.key)
	if err := l.conn.Close(ctx); err != nil || unlockErr != nil {
		if err == nil {
			err = unlockErr
		}
		return fmt.Errorf("close %s: %w", l.what, err)
	}
	return nil
}

// historyLockKey is the pg_advisory_lock key of the dispatcher that leads
// the history's maintenance ("ax_histo" in ASCII).
const historyLockKey int64 = 0x61785f686973746f

// HistoryLock is the session of the dispatcher that leads the history's
// maintenance (partitions, moves, retention; see [Store.MoveHistory]). It
// is not safe for concurrent use.
type HistoryLock struct {
	sessionLock
}

// AcquireHistory takes the history's maintenance lock without waiting, on a
// connection of its own; it returns an error wrapping [ErrNotLeader] when
// another session holds it. Close the lock to release it.
func (s *Store) AcquireHistory(ctx context.Context) (*HistoryLock, error) {
	l, err := s.acquireSessionLock(ctx, historyLockKey, "history maintenance lock", ErrNotLeader)
	if err != nil {
		return nil, err
	}
	return &HistoryLock{l}, nil
}
