// Package layout holds the tests that enforce AX's import graph: services
// never import each other, the executor never imports the store, and the
// vocabulary (schemas) imports nothing but the standard library. See
// docs/architecture.md.
package layout
