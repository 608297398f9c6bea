package schemas

import (
	"math"
	"slices"
	"time"
)

// WithDefaults returns a copy of t (which must not be nil) with every default
// filled in: timeout "1h" ([DefaultTimeout]), max_attempts 1, backoff
// "fixed", intervals 30 s and 1800 s, priority "normal", schema_version 1,
// dispatch strategy "pull", blocking strategy "serial", for each cron
// trigger timezone "UTC", misfire "skip" and, with "catch_up", max_catch_up
// 10, and on "success" for each after entry. The copy shares no memory with t.
func (t *Task) WithDefaults() *Task {
	c := *t
	c.Triggers = slices.Clone(t.Triggers)
	c.Dispatch.Tags = slices.Clone(t.Dispatch.Tags)
	c.Dispatch.TagsAll = slices.Clone(t.Dispatch.TagsAll)
	c.PayloadSchema = slices.Clone(t.PayloadSchema)
	c.After = slices.Clone(t.After)

	if c.Execution.Timeout == "" {
		c.Execution.Timeout = "1h"
	}
	r := &c.Execution.Retry
	if r.MaxAttempts == 0 {
		r.MaxAttempts = DefaultMaxAttempts
	}
	if r.Backoff == "" {
		r.Backoff = BackoffFixed
	}
	r.InitialIntervalSec = floatOr(r.InitialIntervalSec, DefaultInitialInterval.Seconds())
	r.MaxIntervalSec = floatOr(r.MaxIntervalSec, DefaultMaxInterval.Seconds())
	if c.Priority == "" {
		c.Priority = PriorityNormal
	}
	if c.SchemaVersion == 0 {
		c.SchemaVersion = DefaultSchemaVersion
	}
	if c.Dispatch.Strategy == "" {
		c.Dispatch.Strategy = DispatchPull
	}
	if c.Concurrency.BlockingStrategy == "" {
		c.Concurrency.BlockingStrategy = DefaultBlockingStrategy
	}
	for i := range c.Triggers {
		c.Triggers[i] = c.Triggers[i].WithDefaults()
	}
	for i := range c.After {
		if c.After[i].On == "" {
			c.After[i].On = DefaultAfterCondition
		}
	}
	return &c
}

// floatOr returns a new pointer to *p, or to def when p is nil.
func floatOr(p *float64, def float64) *float64 {
	if p != nil {
		def = *p
	}
	return &def
}

// TimeoutDuration returns how long one attempt may run: execution.timeout,
// or [DefaultTimeout] when it is empty, not a duration or not positive.
func (t *Task) TimeoutDuration() time.Duration {
	d, err := time.ParseDuration(string(t.Execution.Timeout))
	if err != nil || d <= 0 {
		return DefaultTimeout
	}
	return d
}

// Initial returns the wait before the second attempt: initial_interval_sec,
// or [DefaultInitialInterval] when unset. A negative value counts as zero.
func (r Retry) Initial() time.Duration {
	if r.InitialIntervalSec == nil {
		return DefaultInitialInterval
	}
	return seconds(*r.InitialIntervalSec)
}

// Max returns the cap on the wait between attempts: max_interval_sec, or
// [DefaultMaxInterval] when unset or not positive.
func (r Retry) Max() time.Duration {
	if r.MaxIntervalSec == nil || *r.MaxIntervalSec <= 0 {
		return DefaultMaxInterval
	}
	return seconds(*r.MaxIntervalSec)
}

// seconds converts s seconds to a duration, clamped to [0, math.MaxInt64].
func seconds(s float64) time.Duration {
	ns := s * float64(time.Second)
	switch {
	case !(ns > 0): // negative, zero or NaN
		return 0
	case ns >= math.MaxInt64:
		return math.MaxInt64
	}
	return time.Duration(ns)
}
