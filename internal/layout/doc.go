// Package layout holds the tests that enforce AX's import graph: services
// never import each other, the executor never imports the store, the
// vocabulary (schemas) imports nothing but the standard library, and a
// type has one name (no forwarding aliases outside a short allow-list),
// and the services' hot path stays in functions of at most 60 lines and
// files of at most 700.
// See docs/architecture.md.
package layout
