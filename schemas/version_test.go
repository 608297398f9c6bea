package schemas_test

import (
	"testing"

	"github.com/ax-scheduler/ax/schemas"
)

func TestVersionAtLeast(t *testing.T) {
	for _, c := range []struct {
		v, min string
		want   bool
	}{
		{"1.0.0", "", true},
		{"garbage", "", true},
		{"1.4.0", "1.4.0", true},
		{"1.10.0", "1.4.0", true},
		{"1.3.9", "1.4.0", false},
		{"1.4.0-rc.1", "1.4.0", false},
		{"1.4.0", "1.4.0-rc.1", true},
		{"1.4.0-rc.2", "1.4.0-rc.10", false},
		{"1.4.0-rc.1", "1.4.0-1", true},
		{"1.4.0-rc", "1.4.0-rc.1", false},
		{"2.0.0+build.5", "2.0.0", true},
		{"garbage", "0.0.1", false},
		{"1.2", "1.0.0", false},
	} {
		if got := schemas.VersionAtLeast(c.v, c.min); got != c.want {
			t.Errorf("VersionAtLeast(%q, %q) = %v, want %v", c.v, c.min, got, c.want)
		}
	}
}
