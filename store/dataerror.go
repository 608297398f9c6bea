package store

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// DataError is an error that one row of a batch can cause by what it holds,
// so that the same batch would fail again however often it is retried: a
// value PostgreSQL refuses (SQLSTATE class 22, data exception: a NUL in text,
// bytes that are not UTF-8, a time out of range…), a constraint it breaks
// (class 23, but for the unique violations ON CONFLICT absorbs), a row over
// a limit (class 54), or a value that cannot be encoded for the statement.
// A caller isolates such a row by splitting the batch. IsDataError tells.
type DataError struct {
	// Code is the SQLSTATE, or empty for an encoding error.
	Code string
	err  error
}

func (e *DataError) Error() string { return e.err.Error() }
func (e *DataError) Unwrap() error { return e.err }

// IsDataError reports whether err is a [DataError] or a PostgreSQL error of
// the classes it names: an error a batch's content caused, not the
// database's or the network's state.
func IsDataError(err error) bool {
	if _, ok := errors.AsType[*DataError](err); ok {
		return true
	}
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	if !ok {
		return false
	}
	return strings.HasPrefix(pgErr.Code, "22") || strings.HasPrefix(pgErr.Code, "54") ||
		(strings.HasPrefix(pgErr.Code, "23") && pgErr.Code != "23505")
}
