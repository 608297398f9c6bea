// Package buildinfo tells which build of AX is running: `ax version`,
// `ax --version` and every service's ax_build_info metric.
package buildinfo

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Version is AX's version, set at link time with
// -ldflags "-X github.com/ax-scheduler/ax/internal/buildinfo.Version=v1.2.3";
// empty, it is the main module's version as go install records it, or
// "(devel)" for a build from a work tree.
var Version string

// Info is what a build knows of itself.
type Info struct {
	Version string `json:"version"`
	// Revision is the VCS commit the binary was built from, with
	// Modified set when the work tree had changes ("" when unknown).
	Revision  string `json:"revision,omitempty"`
	Time      string `json:"time,omitempty"`
	Modified  bool   `json:"modified,omitempty"`
	GoVersion string `json:"go_version"`
}

// Get returns the running binary's build information.
func Get() Info {
	info := Info{Version: Version, GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if ok {
		if info.Version == "" {
			info.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.Revision = s.Value
			case "vcs.time":
				info.Time = s.Value
			case "vcs.modified":
				info.Modified = s.Value == "true"
			}
		}
	}
	if info.Version == "" {
		info.Version = "(devel)"
	}
	return info
}

// Collector returns the ax_build_info gauge: 1, labelled with the build's
// version, revision and Go version, so that a dashboard or an alert can
// tell which build each process runs.
func Collector() prometheus.Collector {
	i := Get()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "ax_build_info",
		Help:        "1, labelled with the build's version, VCS revision and Go version.",
		ConstLabels: prometheus.Labels{"version": i.Version, "revision": i.Revision, "goversion": i.GoVersion},
	})
	g.Set(1)
	return g
}
