// Package deploy holds the tests of the deployment files under deploy/:
// the Helm chart, rendered with helm (built from the Go module proxy) and
// checked against the topology that streams/ builds.
package deploy
