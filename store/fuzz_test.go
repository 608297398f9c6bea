package store_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/ax-scheduler/ax/schemas"
)

// FuzzAlertParams decodes arbitrary alert rule parameters: no input panics,
// every refusal is an AlertConfigError naming kind, level or a params field,
// and what is accepted lies within the bounds the rule kinds document.
func FuzzAlertParams(f *testing.F) {
	for _, s := range []struct{ kind, level, params string }{
		{"consecutive_failures", "P1", `{"failures":3}`},
		{"timeout_rate", "P0", `{"rate":0.5,"window":"10m","min_attempts":5}`},
		{"timeout_rate", "P0", `{"rate":"NaN"}`},
		{"duration_jitter", "P2", `{"factor":1e400}`},
		{"duration_jitter", "P2", `{"runs":10,"min_runs":11}`},
		{"backlog", "P1", `{"instances":-1,"throttle":"-1s"}`},
		{"nope", "P9", `[]`},
		{"consecutive_failures", "P1", `null`},
	} {
		f.Add(s.kind, s.level, []byte(s.params))
	}
	f.Fuzz(func(t *testing.T, kind, level string, params []byte) {
		r := schemas.AlertRule{Name: "fuzz", Kind: schemas.AlertKind(kind), Level: schemas.AlertLevel(level), Params: json.RawMessage(params)}
		p, err := r.DecodeParams()
		if err != nil {
			var ce *schemas.AlertConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("DecodeParams(%s %s %q) = %v, not an AlertConfigError", kind, level, params, err)
			}
			if ce.Field != "kind" && ce.Field != "level" && ce.Field != "params" && !strings.HasPrefix(ce.Field, "params.") {
				t.Fatalf("DecodeParams(%s %s %q) names the field %q", kind, level, params, ce.Field)
			}
			return
		}
		switch {
		case p.Failures < 1 || p.Tasks < 1 || p.MinAttempts < 1 || p.Instances < 1,
			p.Runs < 2 || p.MinRuns < 2 || p.MinRuns > p.Runs,
			!(p.Rate > 0 && p.Rate <= 1) || !(p.Factor > 1 && p.Factor <= 1000),
			p.Window <= 0 || p.Age <= 0 || p.Throttle < 0:
			t.Fatalf("DecodeParams(%s %s %q) accepted %+v, outside the documented bounds", kind, level, params, p)
		}
	})
}
