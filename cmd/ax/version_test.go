package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/ax-scheduler/ax/internal/buildinfo"
)

// TestVersion: ax version and ax --version print the build's version;
// -o json its fields.
func TestVersion(t *testing.T) {
	old := buildinfo.Version
	t.Cleanup(func() { buildinfo.Version = old })
	buildinfo.Version = "v1.2.3"
	ax := func(args ...string) (int, string) {
		var out, errOut bytes.Buffer
		code := run(t.Context(), args, strings.NewReader(""), &out, &errOut)
		return code, out.String() + errOut.String()
	}
	if code, out := ax("version"); code != 0 || !strings.HasPrefix(out, "ax v1.2.3\nrevision ") || !strings.Contains(out, "go1.") {
		t.Errorf("ax version: exit %d\n%s", code, out)
	}
	if code, out := ax("--version"); code != 0 || out != "ax v1.2.3\n" {
		t.Errorf("ax --version: exit %d %q", code, out)
	}
	code, out := ax("version", "-o", "json")
	var i buildinfo.Info
	if code != 0 || json.Unmarshal([]byte(out), &i) != nil || i.Version != "v1.2.3" || i.GoVersion == "" {
		t.Errorf("ax version -o json: exit %d\n%s", code, out)
	}
}
