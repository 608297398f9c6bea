package api_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestAccessLogLevels: an answered request is a debug line (a line per
// call, per run under ax dev), a refused one an info line.
func TestAccessLogLevels(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.do("GET", "/v1/tasks", "", nil)
	e.do("GET", "/v1/tasks/missing", "", nil)
	levels := map[string]string{}
	for l := range strings.Lines(e.log.String()) {
		var line struct{ Level, Path, Message string }
		if err := json.Unmarshal([]byte(l), &line); err == nil && line.Message == "http request" {
			levels[line.Path] = line.Level
		}
	}
	if levels["/v1/tasks"] != "debug" || levels["/v1/tasks/missing"] != "info" {
		t.Errorf("access log levels by path = %v, want /v1/tasks debug (answered), /v1/tasks/missing info (404)", levels)
	}
}
