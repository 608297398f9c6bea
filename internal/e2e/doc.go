// Package e2e holds AX's end-to-end tests and the pipeline benchmark: the
// real services as separate Run loops, each on its own connection to an
// embedded NATS server, over a fresh PostgreSQL database per test.
package e2e
