package e2e_test

import (
	"encoding/json"
	"os"
	"regexp"
	"testing"
)

// TestDashboardStatsAndExporterLeaders: every stat panel of
// deploy/grafana/ax.json shows 0, not "No data", when its query has no
// series; and every exporter consumer figure it reads is the consumer
// leader's (is_consumer_leader="true"): on a cluster a node that does not
// lead a consumer reports 0 for it, which a max would take when the
// leader's series is missing, and a sum would add.
func TestDashboardStatsAndExporterLeaders(t *testing.T) {
	data, err := os.ReadFile("../../deploy/grafana/ax.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title       string `json:"title"`
			Type        string `json:"type"`
			FieldConfig struct {
				Defaults map[string]any `json:"defaults"`
			} `json:"fieldConfig"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatal(err)
	}
	selector := regexp.MustCompile(`jetstream_consumer_\w+(\{[^}]*\})?`)
	stats, reads := 0, 0
	for _, p := range dash.Panels {
		if p.Type == "stat" {
			stats++
			if p.FieldConfig.Defaults["noValue"] != "0" {
				t.Errorf("stat panel %q: noValue %v, want \"0\"", p.Title, p.FieldConfig.Defaults["noValue"])
			}
		}
		for _, tg := range p.Targets {
			for _, sel := range selector.FindAllString(tg.Expr, -1) {
				reads++
				if !regexp.MustCompile(`is_consumer_leader="true"`).MatchString(sel) {
					t.Errorf("panel %q reads %s of every node, not the consumer leader's", p.Title, sel)
				}
			}
		}
	}
	if stats == 0 || reads == 0 {
		t.Errorf("%d stat panels, %d exporter consumer reads: the dashboard changed shape", stats, reads)
	}
}
