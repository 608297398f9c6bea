package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams/natsauth"
)

// devAdminName names the admin token ax dev makes.
const devAdminName = "dev-admin"

// devOperator is the operator the audit trail records for ax dev's own
// changes (its admin token).
const devOperator = "ax dev"

// devAdminToken returns the secret of ax dev's admin token, kept in
// <dir>/admin.token (mode 0600): the one there while its token is live in
// the store, else a new admin token called dev-admin, written there
// (revoking the dev-admin token whose secret was lost with the file).
func devAdminToken(ctx context.Context, st *store.Store, dir string) (secret string, made bool, err error) {
	path := filepath.Join(dir, "admin.token")
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return "", false, fmt.Errorf("read the dev admin token: %w", err)
	default:
		secret = strings.TrimSpace(string(data))
		_, err := st.TokenBySecret(ctx, secret)
		if err == nil {
			return secret, false, nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			return "", false, fmt.Errorf("check the dev admin token in %s: %w", path, err)
		}
	}
	_, secret, err = st.CreateToken(ctx, devAdminName, schemas.RoleAdmin, devOperator)
	if errors.Is(err, store.ErrTokenNameTaken) {
		if _, err := st.RevokeToken(ctx, devAdminName, devOperator); err != nil {
			return "", false, fmt.Errorf("replace the dev admin token: %w", err)
		}
		_, secret, err = st.CreateToken(ctx, devAdminName, schemas.RoleAdmin, devOperator)
	}
	if err != nil {
		return "", false, fmt.Errorf("make the dev admin token: %w", err)
	}
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		return "", false, fmt.Errorf("write the dev admin token: %w", err)
	}
	// WriteFile keeps the mode of a file that was there.
	if err := os.Chmod(path, 0o600); err != nil {
		return "", false, fmt.Errorf("write the dev admin token: %w", err)
	}
	return secret, true, nil
}

// devNATSUsers returns the passwords of ax dev's NATS users, one per
// service role, kept in <dir>/nats-users.json (mode 0600).
func devNATSUsers(dir string) (map[natsauth.Role]string, error) {
	return natsauth.LoadOrCreatePasswords(filepath.Join(dir, "nats-users.json"))
}
