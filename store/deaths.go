package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// NotCountedReasonPrefix begins the reason of an attempt whose worker
// died (its lease expired) and that spends none of the instance's
// max_attempts (see [Store.CountDeaths]). It begins with [LeaseExpiredReasonPrefix] too, so
// that the fleet metrics count it as a lease expiry.
const NotCountedReasonPrefix = LeaseExpiredReasonPrefix + ", not counted"

// QuarantinedReasonPrefix begins the reason of an instance failed because
// too many workers died while running it.
const QuarantinedReasonPrefix = "quarantined"

// TiedReason is in the reason of the retry of an attempt whose worker
// died, at or over the deaths that quarantine an instance, beside another
// attempt with as many: neither is quarantined, each is retried apart,
// and the next death tells them apart (so such a poison takes one worker
// more for each tie).
const TiedReason = "tied: neither quarantined"

// SpendsNoAttempt reports whether a transition to RETRYING with reason
// spent none of the instance's max_attempts: the attempt was handed back by
// its worker, or its worker died.
func SpendsNoAttempt(reason string) bool {
	return IsHandedBackReason(reason) || strings.HasPrefix(reason, NotCountedReasonPrefix)
}

// CountDeaths counts one more worker death on the instance of each of in,
// attempts whose lease expired with the attempt unfinished, and returns
// each instance's deaths by attempt ([2]int64{instance, attempt}). An
// attempt no longer current or no longer DISPATCHED or RUNNING is absent
// (there is nothing to fail); one whose death was counted before (the
// reaper counts again after it failed to apply what it counted) is not
// counted twice. One statement; rows locked in id order.
func (s *Store) CountDeaths(ctx context.Context, in []Failure) (map[[2]int64]int, error) {
	if len(in) == 0 {
		return nil, nil
	}
	ids, attempts := make([]int64, len(in)), make([]int32, len(in))
	for i, f := range in {
		ids[i], attempts[i] = f.InstanceID, int32(f.Attempt)
	}
	out := make(map[[2]int64]int, len(in))
	err := queryWith(ctx, s.pool, byKey, func(rows pgx.Rows) error {
		var (
			id              int64
			attempt, deaths int32
		)
		_, err := pgx.ForEachRow(rows, []any{&id, &attempt, &deaths}, func() error {
			out[[2]int64{id, int64(attempt)}] = int(deaths)
			return nil
		})
		return err
	}, `
WITH r AS (
	SELECT DISTINCT * FROM unnest($1::bigint[], $2::int[]) AS t(id, attempt)
), cur AS (
	-- In id order, as every batch statement locks (see reportRows.record).
	SELECT i.id FROM `+lockedInstances("r")+`
	JOIN r ON r.id = i.id AND r.attempt = i.attempt WHERE i.state IN ('DISPATCHED', 'RUNNING')
)
UPDATE instances i SET
	deaths = CASE WHEN i.death_attempt < i.attempt THEN i.deaths + 1 ELSE i.deaths END,
	death_attempt = i.attempt
FROM cur WHERE i.id = cur.id
RETURNING i.id, i.attempt, i.deaths`, ids, attempts)
	if err != nil {
		return nil, fmt.Errorf("count worker deaths of %d attempts: %w", len(in), err)
	}
	return out, nil
}
