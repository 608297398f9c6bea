package store_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
)

func TestRoles(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		role, need schemas.Role
		want       bool
	}{
		{schemas.RoleViewer, schemas.RoleViewer, true},
		{schemas.RoleViewer, schemas.RoleOperator, false},
		{schemas.RoleOperator, schemas.RoleViewer, true},
		{schemas.RoleOperator, schemas.RoleAdmin, false},
		{schemas.RoleAdmin, schemas.RoleOperator, true},
		{schemas.RoleAdmin, schemas.RoleAdmin, true},
		{"root", schemas.RoleViewer, false},
		{"", schemas.RoleViewer, false},
	} {
		if got := c.role.Includes(c.need); got != c.want {
			t.Errorf("%q.Includes(%q) = %t, want %t", c.role, c.need, got, c.want)
		}
	}
	if r, err := schemas.ParseRole("operator"); err != nil || r != schemas.RoleOperator {
		t.Errorf("ParseRole(operator) = %q, %v", r, err)
	}
	if _, err := schemas.ParseRole("Admin"); err == nil || !strings.Contains(err.Error(), "use viewer, operator or admin") {
		t.Errorf("ParseRole(Admin) = %v", err)
	}
}

func TestTokenSecrets(t *testing.T) {
	t.Parallel()
	a, err := store.NewTokenSecret()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := store.NewTokenSecret()
	if a == b || !strings.HasPrefix(a, "axt_") || len(a) != 4+43 || !store.ValidTokenSecret(a) {
		t.Errorf("NewTokenSecret = %q, %q", a, b)
	}
	for _, bad := range []string{"", "axt_", a[:len(a)-1], "xyz_" + a[4:], a + "=", strings.Replace(a, a[10:11], "+", 1)} {
		if store.ValidTokenSecret(bad) {
			t.Errorf("ValidTokenSecret(%q) = true", bad)
		}
	}
	if h := store.HashTokenSecret(a); len(h) != 32 || string(h) == string(store.HashTokenSecret(b)) {
		t.Errorf("HashTokenSecret = %x", h)
	}
}

func TestTokens(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	st := store.New(db.Pool)
	ctx := t.Context()

	if ok, err := st.LiveTokenExists(ctx, schemas.RoleViewer); err != nil || ok {
		t.Fatalf("LiveTokenExists on an empty table = %t, %v", ok, err)
	}
	op, opSecret, err := st.CreateToken(ctx, "ci", schemas.RoleOperator, "test")
	if err != nil {
		t.Fatal(err)
	}
	if op.ID == 0 || op.Name != "ci" || op.Role != schemas.RoleOperator || op.CreatedAt.IsZero() || op.LastUsedAt != nil || op.RevokedAt != nil {
		t.Errorf("CreateToken = %+v", op)
	}
	// Only the hash is stored.
	var stored []byte
	if err := db.Pool.QueryRow(ctx, `SELECT secret_hash FROM api_tokens WHERE id = $1`, op.ID).Scan(&stored); err != nil ||
		string(stored) != string(store.HashTokenSecret(opSecret)) {
		t.Errorf("stored hash = %x, %v", stored, err)
	}
	var plain int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM api_tokens WHERE position($1::bytea IN secret_hash) > 0`, []byte(opSecret)).Scan(&plain); err != nil || plain != 0 {
		t.Errorf("the secret itself is in the table (%d rows, %v)", plain, err)
	}

	for _, c := range []struct {
		name string
		role schemas.Role
		want string
	}{
		{"ci", schemas.RoleViewer, "a live token already has this name"},
		{"ci bot", schemas.RoleViewer, "token name"},
		{"1ci", schemas.RoleViewer, "starting with a letter"},
		{"ci2", "root", "use viewer, operator or admin"},
	} {
		if _, _, err := st.CreateToken(ctx, c.name, c.role, "test"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CreateToken(%q, %q) = %v, want %q", c.name, c.role, err, c.want)
		}
	}
	if _, _, err := st.CreateToken(ctx, "ci", schemas.RoleViewer, "test"); !errors.Is(err, store.ErrTokenNameTaken) {
		t.Errorf("CreateToken of a taken name = %v, want ErrTokenNameTaken", err)
	}
	if ok, err := st.LiveTokenExists(ctx, schemas.RoleOperator); err != nil || !ok {
		t.Errorf("LiveTokenExists(operator) with an operator token = %t, %v", ok, err)
	}
	if ok, err := st.LiveTokenExists(ctx, schemas.RoleAdmin); err != nil || ok {
		t.Errorf("LiveTokenExists(admin) with an operator token = %t, %v", ok, err)
	}

	got, err := st.TokenBySecret(ctx, opSecret)
	if err != nil || got.ID != op.ID || got.Role != schemas.RoleOperator {
		t.Errorf("TokenBySecret = %+v, %v", got, err)
	}
	other, _ := store.NewTokenSecret()
	for _, s := range []string{other, "nonsense"} {
		if _, err := st.TokenBySecret(ctx, s); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("TokenBySecret(%q) = %v, want ErrNotFound", s, err)
		}
	}

	// last_used_at moves at most once a minute.
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	lastUsed := func() time.Time {
		t.Helper()
		var lu time.Time
		if err := db.Pool.QueryRow(ctx, `SELECT last_used_at FROM api_tokens WHERE id = $1`, op.ID).Scan(&lu); err != nil {
			t.Fatal(err)
		}
		return lu.UTC()
	}
	for _, c := range []struct{ touch, want time.Time }{
		{at, at},
		{at.Add(59 * time.Second), at},
		{at.Add(time.Minute), at.Add(time.Minute)},
	} {
		if err := st.TouchToken(ctx, op.ID, c.touch); err != nil {
			t.Fatal(err)
		}
		if got := lastUsed(); !got.Equal(c.want) {
			t.Errorf("after TouchToken(%v) last_used_at = %v, want %v", c.touch, got, c.want)
		}
	}

	admin, adminSecret, err := st.CreateToken(ctx, "alice@example.com", schemas.RoleAdmin, "test")
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := st.LiveTokenExists(ctx, schemas.RoleAdmin); err != nil || !ok {
		t.Errorf("LiveTokenExists(admin) = %t, %v", ok, err)
	}

	// Revoke by name, then by id.
	revoked, err := st.RevokeToken(ctx, "ci", "test")
	if err != nil || revoked.ID != op.ID || revoked.RevokedAt == nil {
		t.Errorf("RevokeToken(ci) = %+v, %v", revoked, err)
	}
	if _, err := st.TokenBySecret(ctx, opSecret); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("TokenBySecret of a revoked token = %v, want ErrNotFound", err)
	}
	if _, err := st.RevokeToken(ctx, "ci", "test"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RevokeToken(ci) again = %v, want ErrNotFound", err)
	}
	if _, err := st.RevokeToken(ctx, "999", "test"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RevokeToken(999) = %v, want ErrNotFound", err)
	}
	// A revoked token's name may be taken again.
	if _, _, err := st.CreateToken(ctx, "ci", schemas.RoleViewer, "test"); err != nil {
		t.Errorf("CreateToken(ci) after its revocation: %v", err)
	}
	if _, err := st.RevokeToken(ctx, strconv.FormatInt(admin.ID, 10), "test"); err != nil {
		t.Errorf("RevokeToken by id: %v", err)
	}
	if _, err := st.TokenBySecret(ctx, adminSecret); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("TokenBySecret of the revoked admin = %v", err)
	}
	if ok, err := st.LiveTokenExists(ctx, schemas.RoleAdmin); err != nil || ok {
		t.Errorf("LiveTokenExists(admin) after the revocation = %t, %v", ok, err)
	}

	all, err := st.ListTokens(ctx)
	if err != nil || len(all) != 3 {
		t.Fatalf("ListTokens = %+v, %v", all, err)
	}
	if all[0].Name != "ci" || all[0].RevokedAt == nil || all[0].LastUsedAt == nil ||
		all[1].Name != "alice@example.com" || all[1].RevokedAt == nil || all[2].Name != "ci" || all[2].RevokedAt != nil {
		t.Errorf("ListTokens = %+v", all)
	}
}
