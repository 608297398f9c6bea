package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TokenPrefix starts every token secret, so that a secret is recognisable
// in a leaked file or a log line (and secret scanners can find it).
const TokenPrefix = "axt_"

// tokenSecretRE is the shape of a secret: the prefix and 32 random bytes in
// unpadded base64url.
var tokenSecretRE = regexp.MustCompile(`^axt_[A-Za-z0-9_-]{43}$`)

// ValidTokenSecret reports whether s has the shape of a token secret.
func ValidTokenSecret(s string) bool { return tokenSecretRE.MatchString(s) }

// NewTokenSecret returns a fresh secret: [TokenPrefix] and 32 random bytes
// in unpadded base64url.
func NewTokenSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("new token secret: %w", err)
	}
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// HashTokenSecret returns the SHA-256 of secret, which is all the store
// keeps of it. A secret has 256 random bits, so a plain hash (no salt, no
// slow hash) is as safe to keep as the secret is hard to guess, and lets a
// lookup be an index scan.
func HashTokenSecret(secret string) []byte {
	sum := sha256.Sum256([]byte(secret))
	return sum[:]
}

// tokenNameRE is the rule of a token name: it becomes the operator name
// of every change made with the token.
var tokenNameRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9._@-]{0,63}$`)

// ValidateTokenName returns an error that says how to fix name when it
// cannot name a token.
func ValidateTokenName(name string) error {
	if !tokenNameRE.MatchString(name) {
		return fmt.Errorf("token name %q: use 1-64 letters, digits, '.', '_', '@' and '-', starting with a letter", name)
	}
	return nil
}

// ErrTokenNameTaken is returned, wrapped, by [Store.CreateToken] when a live
// token already has the name.
var ErrTokenNameTaken = errors.New("a live token already has this name")

const tokenColumns = `id, name, role, created_at, last_used_at, revoked_at`

// tokenDetails are a token action's details: never its secret.
const tokenDetails = `jsonb_build_object('token_id', id, 'token', name, 'role', role)`

func scanToken(row pgx.Row) (schemas.Token, error) {
	var t schemas.Token
	err := row.Scan(&t.ID, &t.Name, &t.Role, &t.CreatedAt, &t.LastUsedAt, &t.RevokedAt)
	return t, err
}

// CreateToken makes a live token called name with role and returns it with
// its secret, which is not kept and cannot be read again; the audit trail
// records that operator made it (an action token_create of
// schemas.AuditTaskTokens, in the same statement). A name that a live token
// has is refused with [ErrTokenNameTaken].
func (s *Store) CreateToken(ctx context.Context, name string, role schemas.Role, operator string) (schemas.Token, string, error) {
	if err := ValidateTokenName(name); err != nil {
		return schemas.Token{}, "", fmt.Errorf("create token: %w", err)
	}
	if _, err := schemas.ParseRole(string(role)); err != nil {
		return schemas.Token{}, "", fmt.Errorf("create token %s: %w", name, err)
	}
	secret, err := NewTokenSecret()
	if err != nil {
		return schemas.Token{}, "", fmt.Errorf("create token %s: %w", name, err)
	}
	t, err := scanToken(s.pool.QueryRow(ctx, `
		WITH t AS (
			INSERT INTO api_tokens (name, role, secret_hash) VALUES ($1, $2, $3)
			RETURNING `+tokenColumns+`
		), a AS (`+actionInsert(4, tokenDetails)+`)
		SELECT `+tokenColumns+` FROM t`, name, string(role), HashTokenSecret(secret),
		string(schemas.ActionTokenCreate), schemas.AuditTaskTokens, operator))
	if pe, ok := errors.AsType[*pgconn.PgError](err); ok && pe.Code == "23505" && pe.ConstraintName == "api_tokens_live_name_idx" {
		return schemas.Token{}, "", fmt.Errorf("create token %s: %w; revoke it first or choose another name", name, ErrTokenNameTaken)
	}
	if err != nil {
		return schemas.Token{}, "", fmt.Errorf("create token %s: %w", name, err)
	}
	return t, secret, nil
}

// TokenBySecret returns the live token whose secret is secret, or an error
// wrapping [ErrNotFound] when there is none (a secret never made, or a
// token revoked).
func (s *Store) TokenBySecret(ctx context.Context, secret string) (schemas.Token, error) {
	if !ValidTokenSecret(secret) {
		return schemas.Token{}, fmt.Errorf("look up token: malformed secret: %w", ErrNotFound)
	}
	t, err := scanToken(s.pool.QueryRow(ctx, `
		SELECT `+tokenColumns+` FROM api_tokens WHERE secret_hash = $1 AND revoked_at IS NULL`, HashTokenSecret(secret)))
	if errors.Is(err, pgx.ErrNoRows) {
		return schemas.Token{}, fmt.Errorf("look up token: %w", ErrNotFound)
	}
	if err != nil {
		return schemas.Token{}, fmt.Errorf("look up token: %w", err)
	}
	return t, nil
}

// TouchToken records that token id was used at at, unless it was already
// recorded as used less than a minute before: a busy token costs one write
// a minute, whichever API replica sees it.
func (s *Store) TouchToken(ctx context.Context, id int64, at time.Time) error {
	_, err := s.pool.Exec(ctx, `
		UPDATE api_tokens SET last_used_at = $2
		WHERE id = $1 AND (last_used_at IS NULL OR last_used_at <= $2::timestamptz - interval '1 minute')`, id, at)
	if err != nil {
		return fmt.Errorf("touch token %d: %w", id, err)
	}
	return nil
}

// ListTokens returns every token, the revoked ones too, by id.
func (s *Store) ListTokens(ctx context.Context) ([]schemas.Token, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+tokenColumns+` FROM api_tokens ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (schemas.Token, error) { return scanToken(row) })
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	return out, nil
}

// RevokeToken revokes the live token that ref names — its id, or its name —
// and returns it; the audit trail records that operator revoked it. A ref
// that names no live token is an error wrapping [ErrNotFound]. Revoking is
// for good: make a new token to take its place.
func (s *Store) RevokeToken(ctx context.Context, ref string, operator string) (schemas.Token, error) {
	q := `WITH t AS (
			UPDATE api_tokens SET revoked_at = now() WHERE %s AND revoked_at IS NULL RETURNING ` + tokenColumns + `
		), a AS (` + actionInsert(2, tokenDetails) + `)
		SELECT ` + tokenColumns + ` FROM t`
	args := []any{ref, string(schemas.ActionTokenRevoke), schemas.AuditTaskTokens, operator}
	var row pgx.Row
	if id, err := strconv.ParseInt(ref, 10, 64); err == nil {
		args[0] = id
		row = s.pool.QueryRow(ctx, fmt.Sprintf(q, "id = $1"), args...)
	} else {
		row = s.pool.QueryRow(ctx, fmt.Sprintf(q, "name = $1"), args...)
	}
	t, err := scanToken(row)
	if errors.Is(err, pgx.ErrNoRows) {
		return schemas.Token{}, fmt.Errorf("revoke token %s: no live token has this id or name: %w", ref, ErrNotFound)
	}
	if err != nil {
		return schemas.Token{}, fmt.Errorf("revoke token %s: %w", ref, err)
	}
	return t, nil
}

// LiveTokenExists reports whether a live token has role or a stronger one.
func (s *Store) LiveTokenExists(ctx context.Context, role schemas.Role) (bool, error) {
	var roles []string
	for _, r := range schemas.Roles {
		if r.Includes(role) {
			roles = append(roles, string(r))
		}
	}
	var exists bool
	err := s.pool.QueryRow(ctx, `
		SELECT EXISTS (SELECT 1 FROM api_tokens WHERE revoked_at IS NULL AND role = ANY($1))`, roles).Scan(&exists)
	if err != nil {
		return false, fmt.Errorf("look for a live %s token: %w", strings.Join(roles, " or "), err)
	}
	return exists, nil
}
