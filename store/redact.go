package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// RedactPaths returns the redact paths of each of the named tasks: those of
// every version of its definition ever applied, a deleted task's too, so
// that a path once listed stays hidden in the task's whole history even if
// a later version drops it. A task without any is absent from the map.
func (s *Store) RedactPaths(ctx context.Context, names []string) (map[string][]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT name, p FROM task_versions,
		jsonb_array_elements_text(CASE WHEN jsonb_typeof(definition->'redact') = 'array' THEN definition->'redact' ELSE '[]'::jsonb END) AS p
		WHERE name = ANY($1) ORDER BY name, p`, names)
	if err != nil {
		return nil, fmt.Errorf("read redact paths: %w", err)
	}
	out := make(map[string][]string)
	var name, path string
	_, err = pgx.ForEachRow(rows, []any{&name, &path}, func() error {
		out[name] = append(out[name], path)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read redact paths: %w", err)
	}
	return out, nil
}
