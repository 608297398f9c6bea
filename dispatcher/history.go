package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
)

// HistoryOptions configures the instance history's maintenance, which one
// dispatcher at a time leads (a PostgreSQL advisory lock, see
// [store.Store.AcquireHistory]): it creates the history's partitions
// ahead, moves ended instances out of the hot tables, and ends those whose
// retention ran out (see docs/operations.md, "Instance history and
// retention").
type HistoryOptions struct {
	// After is how long an ended instance stays in the hot tables before
	// it moves to the history (default 7 days). Instances in the hot
	// tables are what the dispatcher's statements touch; the history is
	// read only when asked for (?archived=true).
	After time.Duration
	// Retention is how long instances are kept, counted from when they
	// fired, for every task without a retention of its own; 0 (the
	// default) keeps them forever. It may not be shorter than After.
	Retention time.Duration
	// Archive moves expired instances to the archive tables instead of
	// dropping them, for every task that does not say (archive).
	Archive bool
	// Period is the span of one partition (default month).
	Period store.HistoryPeriod
	// Ahead is how many partitions after the current one are kept made
	// (default 2).
	Ahead int
	// Interval is how often the leader maintains the history, and how
	// often the others try to lead (default 1m).
	Interval time.Duration
	// Disabled turns the maintenance off in this dispatcher.
	Disabled bool
}

// DefaultHistoryAfter is the default of [HistoryOptions.After].
const DefaultHistoryAfter = 7 * 24 * time.Hour

// movesPerRound bounds the families one MoveHistory call moves; a round
// calls it again while the last call was full, for up to half its
// Interval (a fixed 20 calls a round capped the mover at 20,000 a minute,
// 28.8 M a day, below what the pipeline sustains).
const movesPerRound = 1000

// fill fills the defaults and checks them. triggersMaxAge is how long a
// firing stays in AX_TRIGGERS, and so how long after its instance was made
// it can be redelivered.
func (h *HistoryOptions) fill(triggersMaxAge time.Duration) error {
	if h.After <= 0 {
		h.After = DefaultHistoryAfter
	}
	// The key of a dropped instance is gone, and with it the dedupe of its
	// firing: the instance must outlive every redelivery of it.
	if h.After < triggersMaxAge {
		return fmt.Errorf("history after %s is shorter than the %s a firing stays in the triggers stream: a redelivered firing could outlive its instance; raise history after to at least %s", h.After, triggersMaxAge, triggersMaxAge)
	}
	if h.Retention < 0 {
		return fmt.Errorf("history retention %s: want 0 (keep forever) or a positive duration", h.Retention)
	}
	if h.Retention > 0 && h.Retention < h.After {
		return fmt.Errorf("history retention %s is shorter than the time ended instances stay in the hot tables (history after %s): raise the retention or lower history after", h.Retention, h.After)
	}
	if h.Period == "" {
		h.Period = store.HistoryMonth
	}
	if _, err := store.ParseHistoryPeriod(string(h.Period)); err != nil {
		return err
	}
	if h.Ahead <= 0 {
		h.Ahead = 2
	}
	if h.Interval <= 0 {
		h.Interval = time.Minute
	}
	return nil
}

// historyLoop leads the history's maintenance while it holds the lock and
// tries to take the lock every Interval while another dispatcher holds
// it. A failed round is logged and tried again: the history waits, the
// hot path does not.
func (s *Service) historyLoop(ctx context.Context) error {
	h := s.opts.History
	if h.Disabled {
		return nil
	}
	var lock *store.HistoryLock
	defer func() {
		if lock != nil {
			_ = lock.Close(context.WithoutCancel(ctx))
		}
	}()
	tick := time.NewTicker(h.Interval)
	defer tick.Stop()
	for ctx.Err() == nil {
		if lock != nil {
			if err := lock.Check(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn().Err(err).Msg("history maintenance lock lost")
				_ = lock.Close(context.WithoutCancel(ctx))
				lock = nil
			}
		}
		if lock == nil {
			l, err := s.opts.Store.AcquireHistory(ctx)
			switch {
			case err == nil:
				lock = l
				s.log.Info().Msg("leading the history maintenance")
			case !errors.Is(err, store.ErrNotLeader) && ctx.Err() == nil:
				s.log.Warn().Err(err).Msg("history maintenance lock not taken")
			}
		}
		if lock != nil {
			if _, err := s.MaintainHistory(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn().Err(err).Msg("history maintenance failed; trying again at the next interval")
			}
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	return nil
}

// HistoryReport is what one [Service.MaintainHistory] did.
type HistoryReport struct {
	Created []store.HistoryPartition
	Moved   store.MoveResult
	Expired store.ExpireResult
}

// MaintainHistory runs one round of the history's maintenance now: the
// partitions ahead, the moves, the retention. The maintenance loop calls
// it while this dispatcher leads; calling it besides is safe but wasted.
func (s *Service) MaintainHistory(ctx context.Context) (HistoryReport, error) {
	var rep HistoryReport
	h, st, now := s.opts.History, s.opts.Store, s.now()
	created, err := st.EnsureHistoryPartitions(ctx, h.Period, now, h.Period.Later(now, h.Ahead))
	rep.Created = created
	if err != nil {
		return rep, err
	}
	for first, budget := true, time.Now().Add(h.Interval/2); ; first = false {
		res, err := st.MoveHistory(ctx, store.MoveOptions{EndedBefore: now.Add(-h.After), Limit: movesPerRound, Period: h.Period, Sweep: first})
		rep.Moved.Copied, rep.Moved.Moved, rep.Moved.Waiting = rep.Moved.Copied+res.Copied, rep.Moved.Moved+res.Moved, res.Waiting
		if err != nil {
			return rep, err
		}
		if res.Copied < movesPerRound || time.Now().After(budget) {
			break
		}
	}
	tasks, err := st.ListTasks(ctx)
	if err != nil {
		return rep, fmt.Errorf("history retention: %w", err)
	}
	policy := make(map[string]store.Retention)
	for _, t := range tasks {
		if r, ok := taskRetention(t.Definition, h); ok {
			policy[t.Name] = r
		}
	}
	rep.Expired, err = st.ExpireHistory(ctx, store.ExpireOptions{Now: now,
		Default: store.Retention{Keep: h.Retention, Archive: h.Archive}, Tasks: policy})
	if err != nil {
		return rep, err
	}
	if n := len(rep.Created) + rep.Moved.Moved + len(rep.Expired.Dropped) + rep.Expired.Archived + rep.Expired.Deleted; n > 0 {
		s.log.Info().Int("partitions_created", len(rep.Created)).Int("moved", rep.Moved.Moved).
			Int("waiting", rep.Moved.Waiting).Strs("partitions_dropped", rep.Expired.Dropped).
			Int("archived", rep.Expired.Archived).Int("deleted", rep.Expired.Deleted).Msg("history maintained")
	}
	return rep, nil
}

// taskRetention returns the retention of a task that sets its own
// retention or archive; ok is false for one that follows the installation.
// A retention shorter than History.After is History.After: the instance is
// not in the history before.
func taskRetention(def *schemas.Task, h HistoryOptions) (store.Retention, bool) {
	if def == nil || (def.Retention == "" && def.Archive == nil) {
		return store.Retention{}, false
	}
	r := store.Retention{Keep: h.Retention, Archive: h.Archive}
	if def.Retention != "" {
		// Applied definitions were validated; one that no longer parses keeps the default.
		if d, err := schemas.ParseRetention(def.Retention); err == nil {
			r.Keep = max(d, h.After)
		}
	}
	if def.Archive != nil {
		r.Archive = *def.Archive
	}
	return r, true
}
