// Package layout holds the test that enforces AX's import graph: services
// never import each other, the executor never imports the store, and the
// contracts import nothing of AX. See docs/architecture.md.
package layout
