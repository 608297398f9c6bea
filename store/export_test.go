package store

import "github.com/jackc/pgx/v5"

// WithWaiting is the look PromoteWaiting takes first, for the tests of its plan.
const WithWaiting = withWaiting

// RelayTransitions is the relay's page of transitions, for the tests of its plan.
var RelayTransitions = relayTransitions

// Conn is the relay's session, for the tests of its plans.
func (r *Relay) Conn() *pgx.Conn { return r.conn }
