package store

import "embed"

// Migrations holds the store's SQL migrations (goose format) under "migrations/".
// Migrate applies them; they are the store's own, not part of the contracts.
//
//go:embed migrations/*.sql
var Migrations embed.FS
