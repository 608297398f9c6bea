package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Retention is how long instances are kept in the history, counted from
// when they fired, and what becomes of them then.
type Retention struct {
	// Keep is how long they stay; 0 keeps them forever.
	Keep time.Duration
	// Archive moves them to the archive tables instead of dropping them.
	Archive bool
}

// ExpireOptions says what [Store.ExpireHistory] expires.
type ExpireOptions struct {
	// Now is the time retention counts to.
	Now time.Time
	// Default is the installation's retention, for every task not in Tasks.
	Default Retention
	// Tasks holds the retention of each task that sets its own.
	Tasks map[string]Retention
	// Limit is the most instances one row-wise pass expires; 0 means 10000.
	Limit int
}

// ExpireResult is what one [Store.ExpireHistory] did.
type ExpireResult struct {
	// Dropped names the partitions dropped whole.
	Dropped []string
	// Archived and Deleted count the instances moved to the archive and
	// those dropped (with a partition or one by one).
	Archived, Deleted int
}

// ExpireHistory ends the instances in the history whose retention has run
// out: a partition whose whole range is older than the longest retention
// in force is dropped, after its instances that archive are copied to the
// archive; in the partitions left, the instances of a task whose shorter
// retention has run out are archived or deleted one by one. An archived
// instance keeps its key in instance_history_keys, so that a repeated
// firing still finds it; a dropped one leaves its key and its record on
// AX_AUDIT only. Only one session should call it at a time.
func (s *Store) ExpireHistory(ctx context.Context, opts ExpireOptions) (ExpireResult, error) {
	var res ExpireResult
	if opts.Limit <= 0 {
		opts.Limit = 10000
	}
	r := newRetentions(opts)
	if r.shortest <= 0 {
		return res, nil // nothing expires
	}
	cols, err := tableColumns(ctx, s.pool, "instance_history")
	if err != nil {
		return res, fmt.Errorf("expire history: %w", err)
	}
	tcols, err := tableColumns(ctx, s.pool, "instance_transition_history")
	if err != nil {
		return res, fmt.Errorf("expire history: %w", err)
	}
	r.icols, r.tlist = strings.Join(cols, ", "), strings.Join(tcols, ", ")
	if !r.forever {
		if err := s.dropExpiredPartitions(ctx, opts, r, &res); err != nil {
			return res, fmt.Errorf("expire history: %w", err)
		}
	}
	// One by one: the instances of the tasks whose retention is shorter.
	for {
		var n, archived int
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			var err error
			n, archived, err = r.expireRows(ctx, tx, opts)
			return err
		})
		if err != nil {
			return res, fmt.Errorf("expire history: instances of tasks with a shorter retention: %w", err)
		}
		res.Archived += archived
		res.Deleted += n - archived
		if n < opts.Limit {
			return res, nil
		}
	}
}

// retentions are the retentions of an [ExpireOptions] as the statements
// of [Store.ExpireHistory] read them: per task, as the arrays $1, $2, $3
// of retentionPolicies, and the default's archive as $4.
type retentions struct {
	tasks    []string
	keeps    []float64
	archives []bool
	archive  bool
	// forever is true when some retention keeps instances forever;
	// longest and shortest are the longest and the shortest that do not.
	forever           bool
	longest, shortest time.Duration
	// icols and tlist are the columns of the history's instances and
	// transitions, comma-separated.
	icols, tlist string
}

func newRetentions(opts ExpireOptions) retentions {
	r := retentions{tasks: []string{}, keeps: []float64{}, archives: []bool{}, archive: opts.Default.Archive}
	r.forever = opts.Default.Keep <= 0
	r.longest, r.shortest = opts.Default.Keep, opts.Default.Keep
	for name, p := range opts.Tasks {
		r.tasks, r.keeps, r.archives = append(r.tasks, name), append(r.keeps, p.Keep.Seconds()), append(r.archives, p.Archive)
		r.forever = r.forever || p.Keep <= 0
		r.longest = max(r.longest, p.Keep)
		if p.Keep > 0 && (r.shortest <= 0 || p.Keep < r.shortest) {
			r.shortest = p.Keep
		}
	}
	return r
}

// args are the policy's arguments $1 to $4, then more.
func (r retentions) args(more ...any) []any {
	return append([]any{r.tasks, r.keeps, r.archives, r.archive}, more...)
}

// retentionPolicies is the policy of each task, from the arguments $1 to
// $3 of [retentions.args]; a task not in it has the default.
const retentionPolicies = `(SELECT * FROM unnest($1::text[], $2::float8[], $3::bool[]) AS p(task, keep, archive))`

// dropExpiredPartitions drops the partitions whose whole range is older
// than the longest retention, after archiving what archives, oldest first,
// and counts them in res.
func (s *Store) dropExpiredPartitions(ctx context.Context, opts ExpireOptions, r retentions, res *ExpireResult) error {
	parts, err := historyPartitions(ctx, s.pool)
	if err != nil {
		return err
	}
	for _, p := range parts {
		if p.To.After(opts.Now.Add(-r.longest)) {
			break
		}
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			return r.dropPartition(ctx, tx, p.Name, res)
		})
		if err != nil {
			return fmt.Errorf("partition %s: %w", p.Name, err)
		}
		res.Dropped = append(res.Dropped, p.Name)
	}
	return nil
}

// dropPartition archives what archives of the history's partition name,
// deletes the keys of the rest, and drops the partition, in tx.
func (r retentions) dropPartition(ctx context.Context, tx pgx.Tx, name string, res *ExpireResult) error {
	hist, trans := "instance_history_"+name, "instance_transition_history_"+name
	tag, err := tx.Exec(ctx, `INSERT INTO instance_archive (`+r.icols+`)
					SELECT `+prefixed("h", r.icols)+` FROM `+hist+` h LEFT JOIN `+retentionPolicies+` pol ON pol.task = h.task
					WHERE COALESCE(pol.archive, $4)`, r.args()...)
	if err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO instance_transition_archive (`+r.tlist+`)
					SELECT `+prefixed("t", r.tlist)+` FROM `+trans+` t JOIN `+hist+` h ON h.id = t.instance_id
					LEFT JOIN `+retentionPolicies+` pol ON pol.task = h.task WHERE COALESCE(pol.archive, $4)`, r.args()...); err != nil {
		return fmt.Errorf("archive transitions: %w", err)
	}
	var total int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+hist).Scan(&total); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `DELETE FROM instance_history_keys k USING `+hist+` h
					LEFT JOIN `+retentionPolicies+` pol ON pol.task = h.task
					WHERE k.task = h.task AND k.event_id = h.event_id AND k.id = h.id AND NOT COALESCE(pol.archive, $4)`,
		r.args()...); err != nil {
		return fmt.Errorf("delete keys: %w", err)
	}
	if _, err := tx.Exec(ctx, `DROP TABLE `+trans+`, `+hist); err != nil {
		return fmt.Errorf("drop: %w", err)
	}
	res.Archived += int(tag.RowsAffected())
	res.Deleted += total - int(tag.RowsAffected())
	return nil
}

// expireRows archives or deletes in tx at most opts.Limit instances of
// the tasks whose retention ran out, oldest first, and returns how many
// it expired and how many of them it archived.
func (r retentions) expireRows(ctx context.Context, tx pgx.Tx, opts ExpireOptions) (n, archived int, err error) {
	rows, err := tx.Query(ctx, `
				SELECT h.id, h.fired_at, COALESCE(pol.archive, $4) FROM instance_history h LEFT JOIN `+retentionPolicies+` pol ON pol.task = h.task
				WHERE h.fired_at < $6 AND COALESCE(pol.keep, $5) > 0
					AND h.fired_at < $7::timestamptz - make_interval(secs => COALESCE(pol.keep, $5))
				ORDER BY h.fired_at LIMIT $8 FOR UPDATE OF h`,
		r.args(opts.Default.Keep.Seconds(), opts.Now.Add(-r.shortest), opts.Now, opts.Limit)...)
	if err != nil {
		return 0, 0, err
	}
	var ids []int64
	archive := []int64{} // never NULL: NOT id = ANY(NULL) holds for no row
	var at []time.Time
	var a bool
	var id int64
	var t time.Time
	if _, err := pgx.ForEachRow(rows, []any{&id, &t, &a}, func() error {
		ids, at = append(ids, id), append(at, t)
		if a {
			archive = append(archive, id)
		}
		return nil
	}); err != nil {
		return 0, 0, err
	}
	if len(ids) == 0 {
		return 0, 0, nil
	}
	stmts := []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO instance_archive (` + r.icols + `) SELECT ` + r.icols + ` FROM instance_history WHERE id = ANY($1)`, []any{archive}},
		{`INSERT INTO instance_transition_archive (` + r.tlist + `) SELECT ` + r.tlist + `
					FROM instance_transition_history WHERE instance_id = ANY($1)`, []any{archive}},
		{`DELETE FROM instance_history_keys k USING instance_history h
					WHERE h.id = ANY($1) AND h.fired_at = ANY($2) AND NOT h.id = ANY($3)
					AND k.task = h.task AND k.event_id = h.event_id AND k.id = h.id`, []any{ids, at, archive}},
		{`DELETE FROM instance_transition_history WHERE instance_id = ANY($1) AND fired_at = ANY($2)`, []any{ids, at}},
		{`DELETE FROM instance_history WHERE id = ANY($1) AND fired_at = ANY($2)`, []any{ids, at}},
	}
	for _, st := range stmts {
		if _, err := tx.Exec(ctx, st.sql, st.args...); err != nil {
			return 0, 0, err
		}
	}
	return len(ids), len(archive), nil
}
