package apiclient

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/schemas"
)

// Intervals between the reads of [Client.WaitInstance] and
// [Client.WaitFiring]: the first wait, growing by half each time up to the
// last.
const (
	WaitFirstInterval = 100 * time.Millisecond
	WaitMaxInterval   = 2 * time.Second
)

// WaitInstance reads instance id until it has ended (its state is
// terminal) and returns it. When ctx ends first, it returns the instance as
// it last read it (its State is where it was; zero when no read
// succeeded) and ctx's error; any other error of a read ends the wait.
func (c *Client) WaitInstance(ctx context.Context, id int64) (schemas.Instance, error) {
	var in schemas.Instance
	err := poll(ctx, func() (bool, error) {
		got, err := c.GetInstance(ctx, id)
		if err != nil {
			return false, err
		}
		in = got
		return in.State.Terminal(), nil
	})
	return in, err
}

// WatchInstance is [Client.WaitInstance] that calls seen with the instance
// each time it reads it, and reads at least once a second (the interval
// between a handler's progress reports): ax fire --wait draws the
// instance's progress from it.
func (c *Client) WatchInstance(ctx context.Context, id int64, seen func(schemas.Instance)) (schemas.Instance, error) {
	var in schemas.Instance
	err := pollUpTo(ctx, min(WaitMaxInterval, time.Second), func() (bool, error) {
		got, err := c.GetInstance(ctx, id)
		if err != nil {
			return false, err
		}
		in = got
		seen(in)
		return in.State.Terminal(), nil
	})
	return in, err
}

// WaitFiring waits until the firing eventID of task has made its instance
// (the dispatcher creates it; a delayed firing's at its time) and returns
// it, in whatever state it is. While the API answers 404 (or that the
// firing is delayed and waits) it reads again;
// when ctx ends first it returns ctx's error.
func (c *Client) WaitFiring(ctx context.Context, task, eventID string) (schemas.Instance, error) {
	var in schemas.Instance
	err := poll(ctx, func() (bool, error) {
		got, err := c.InstanceByEvent(ctx, task, eventID)
		if IsNotFound(err) || errors.Is(err, ErrFiringPending) {
			return false, nil
		}
		in = got
		return err == nil, err
	})
	return in, err
}

// FireInstance fires task with req and returns the id of the instance the
// firing made: the one in the API's answer or, when the API answered
// before the dispatcher created it, the one [Client.WaitFiring] reads. A
// delayed firing waits until its time. When ctx ends first it returns ctx's
// error wrapped with the event's id; give ctx the deadline the caller
// allows the dispatcher.
func (c *Client) FireInstance(ctx context.Context, task string, req wire.FireRequest) (int64, error) {
	res, err := c.Fire(ctx, task, req)
	if err != nil {
		return 0, err
	}
	if res.InstanceID != 0 {
		return res.InstanceID, nil
	}
	in, err := c.WaitFiring(ctx, task, res.EventID)
	if err != nil {
		return 0, fmt.Errorf("fire %s: no instance for event %s: %w", task, res.EventID, err)
	}
	return in.ID, nil
}

// poll calls check at a growing interval until it reports done, fails, or
// ctx ends. A check that fails because ctx ended returns ctx's error.
func poll(ctx context.Context, check func() (bool, error)) error {
	return pollUpTo(ctx, WaitMaxInterval, check)
}

// pollUpTo is poll with intervals that grow up to maxInterval.
func pollUpTo(ctx context.Context, maxInterval time.Duration, check func() (bool, error)) error {
	interval := WaitFirstInterval
	for {
		done, err := check()
		if done || err != nil {
			if err != nil && ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		interval = min(interval*3/2, maxInterval)
	}
}
