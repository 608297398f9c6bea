package buildinfo

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestBuildInfo: the link-time version wins; ax_build_info is 1 with it.
func TestBuildInfo(t *testing.T) {
	old := Version
	t.Cleanup(func() { Version = old })
	Version = "v9.8.7"
	if got := Get(); got.Version != "v9.8.7" || !strings.HasPrefix(got.GoVersion, "go") {
		t.Errorf("Get() = %+v", got)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(Collector())
	want := `
# HELP ax_build_info 1, labelled with the build's version, VCS revision and Go version.
# TYPE ax_build_info gauge
ax_build_info{goversion="` + Get().GoVersion + `",revision="` + Get().Revision + `",version="v9.8.7"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ax_build_info"); err != nil {
		t.Error(err)
	}
	Version = ""
	if got := Get().Version; got == "" {
		t.Error("no version without -ldflags")
	}
}
