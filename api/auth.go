package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
)

// DefaultTokenCacheTTL is how long the API trusts what it learned of a
// token (valid, and its role; or unknown): a revoked token is refused
// within that time.
const DefaultTokenCacheTTL = 5 * time.Second

// touchInterval is how often a token's last_used_at is written, at most.
const touchInterval = time.Minute

// maxCachedTokens bounds the token cache, so that a client sending random
// secrets cannot grow it without end.
const maxCachedTokens = 10000

// tokenKey is the context key of the token a request authenticated with.
type tokenKey struct{}

// requestToken returns the token the request authenticated with; false for
// a route that needs none.
func requestToken(r *http.Request) (schemas.Token, bool) {
	t, ok := r.Context().Value(tokenKey{}).(schemas.Token)
	return t, ok
}

// authorize puts next behind the token check of rt: a request without a
// token, or with one that is not live, is answered 401; one whose token's
// role is weaker than rt.Role, 403. A route without a role passes every
// request.
func (s *Service) authorize(rt Route, next http.Handler) http.Handler {
	if rt.Role == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		secret, e := bearerSecret(r)
		if e != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="ax"`)
			writeError(w, e)
			return
		}
		tok, ok, err := s.tokens.lookup(r.Context(), secret)
		if err != nil {
			s.writeErr(w, r, internal("look up the API token", err))
			return
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="ax", error="invalid_token"`)
			writeError(w, &wire.Error{Status: http.StatusUnauthorized, Code: "invalid_token",
				Message: "the API token is not valid: it was revoked, or never made; ask an admin for a token (ax token create --role " +
					string(rt.Role) + ") and send it as Authorization: Bearer <token> (ax reads AX_TOKEN or --token)"})
			return
		}
		if !tok.Role.Includes(rt.Role) {
			writeError(w, &wire.Error{Status: http.StatusForbidden, Code: "forbidden",
				Message: fmt.Sprintf("%s %s needs the %s role, and token %q has the %s role; use a token with the %s role or stronger (ax token create --role %s)",
					rt.Method, rt.Pattern, rt.Role, tok.Name, tok.Role, rt.Role, rt.Role)})
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tokenKey{}, tok)))
	})
}

// bearerSecret returns the secret of the request's Authorization: Bearer
// header, or the 401 answer when there is none.
func bearerSecret(r *http.Request) (string, *wire.Error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", &wire.Error{Status: http.StatusUnauthorized, Code: "unauthenticated",
			Message: "this route needs an API token: send Authorization: Bearer <token> (ax reads AX_TOKEN or --token); an admin makes one with ax token create"}
	}
	scheme, secret, _ := strings.Cut(h, " ")
	secret = strings.TrimSpace(secret)
	if !strings.EqualFold(scheme, "Bearer") || secret == "" {
		return "", &wire.Error{Status: http.StatusUnauthorized, Code: "unauthenticated",
			Message: fmt.Sprintf("the Authorization header uses the %q scheme; send Authorization: Bearer <token>", scheme)}
	}
	return secret, nil
}

// tokenCache remembers for a while what the store said of a secret, so
// that a request costs no database round trip, and writes last_used_at at
// most once a minute per token. It is safe for concurrent use.
type tokenCache struct {
	store *store.Store
	ttl   time.Duration
	log   zerolog.Logger

	mu      sync.Mutex
	entries map[string]tokenEntry // by the hash of the secret
	touched map[int64]time.Time   // when this replica last wrote a token's last_used_at
	// revoked holds the ids of the tokens revoked through this replica:
	// refused at once, even by a lookup that read the store before the
	// revocation and answers after it.
	revoked map[int64]bool
}

type tokenEntry struct {
	tok     schemas.Token
	ok      bool
	expires time.Time
}

func newTokenCache(st *store.Store, ttl time.Duration, log zerolog.Logger) *tokenCache {
	return &tokenCache{store: st, ttl: ttl, log: log, entries: map[string]tokenEntry{}, touched: map[int64]time.Time{},
		revoked: map[int64]bool{}}
}

// lookup returns the live token whose secret is secret, and false when
// there is none. The error is the store's failure.
func (c *tokenCache) lookup(ctx context.Context, secret string) (schemas.Token, bool, error) {
	if !store.ValidTokenSecret(secret) {
		return schemas.Token{}, false, nil
	}
	key := string(store.HashTokenSecret(secret))
	now := time.Now()
	c.mu.Lock()
	e, hit := c.entries[key]
	c.mu.Unlock()
	if !hit || now.After(e.expires) {
		tok, err := c.store.TokenBySecret(ctx, secret)
		switch {
		case errors.Is(err, store.ErrNotFound):
			e = tokenEntry{expires: now.Add(c.ttl)}
		case err != nil:
			return schemas.Token{}, false, err
		default:
			e = tokenEntry{tok: tok, ok: true, expires: now.Add(c.ttl)}
		}
		c.put(key, e, now)
	}
	c.mu.Lock()
	if e.ok && c.revoked[e.tok.ID] {
		e = tokenEntry{}
	}
	c.mu.Unlock()
	if e.ok {
		c.touch(ctx, e.tok.ID, now)
	}
	return e.tok, e.ok, nil
}

// forget makes this replica refuse token id from now on: the API that
// revokes a token stops taking it at once, the others within the TTL.
func (c *tokenCache) forget(id int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.revoked) >= maxCachedTokens {
		// A revoked token is refused by the store anyway once the entries
		// that knew it live expire.
		for k, e := range c.entries {
			if e.ok && c.revoked[e.tok.ID] {
				delete(c.entries, k)
			}
		}
		clear(c.revoked)
	}
	c.revoked[id] = true
	for k, e := range c.entries {
		if e.ok && e.tok.ID == id {
			delete(c.entries, k)
		}
	}
}

func (c *tokenCache) put(key string, e tokenEntry, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= maxCachedTokens {
		for k, old := range c.entries {
			if now.After(old.expires) {
				delete(c.entries, k)
			}
		}
		if len(c.entries) >= maxCachedTokens {
			clear(c.entries)
		}
	}
	c.entries[key] = e
}

// touch writes the token's last_used_at when this replica has not in the
// last minute. A failure is not the request's: it is logged, and left for
// the next minute.
func (c *tokenCache) touch(ctx context.Context, id int64, now time.Time) {
	c.mu.Lock()
	due := now.Sub(c.touched[id]) >= touchInterval
	if due {
		if len(c.touched) >= maxCachedTokens {
			clear(c.touched)
		}
		c.touched[id] = now
	}
	c.mu.Unlock()
	if due {
		if err := c.store.TouchToken(ctx, id, now); err != nil {
			c.log.Warn().Err(err).Int64("token_id", id).Msg("record token use")
		}
	}
}

// ErrNoAdminToken is returned, wrapped, by [Service.Run] when no live admin
// token exists: nobody could manage the API it would serve.
var ErrNoAdminToken = errors.New("no live admin token exists")

// checkAdminToken refuses to serve an API that no one could manage.
func (s *Service) checkAdminToken(ctx context.Context) error {
	ok, err := s.opts.Store.LiveTokenExists(ctx, schemas.RoleAdmin)
	if err != nil {
		return fmt.Errorf("api: %w", err)
	}
	if !ok {
		return fmt.Errorf("api: %w, so every route but /healthz would refuse every request; create one with "+
			"`DATABASE_URL=… ax token create --role admin --name <you>` (it prints the secret once; send it as "+
			"Authorization: Bearer <token>, or set AX_TOKEN for ax), then start the API again", ErrNoAdminToken)
	}
	return nil
}

// operator returns who makes the request: the name of the token it
// authenticated with. The X-Ax-Operator header and the operator fields of
// request bodies are not trusted over it: a token names its holder.
func operator(r *http.Request) string {
	tok, _ := requestToken(r)
	return tok.Name
}
