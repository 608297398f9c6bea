package schemas

import "embed"

// Migrations holds the store's SQL migrations (goose format) under "migrations/".
//
//go:embed migrations/*.sql
var Migrations embed.FS
