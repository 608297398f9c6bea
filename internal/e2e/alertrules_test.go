package e2e_test

import (
	"net"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ax-scheduler/ax/auditor"
	"github.com/ax-scheduler/ax/dispatcher"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/streamstest"
)

// TestPrometheusAlertRulesWatchJetStreamWrites reads
// deploy/prometheus/alerts.yml, the default Prometheus alert rules: there
// is one on JetStream refusing writes, one on failing dispatcher batches and
// one on the store's pressure; every ax_ metric a rule uses is one the
// services register and every jetstream_ one the exporter exports;
// prometheus.yml loads the file, docker-compose.yml mounts it beside
// prometheus.yml, and Prometheus scrapes the dispatcher where it serves
// its metrics.
func TestPrometheusAlertRulesWatchJetStreamWrites(t *testing.T) {
	t.Parallel()
	var rules struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert  string            `json:"alert"`
				Expr   string            `json:"expr"`
				Labels map[string]string `json:"labels"`
			} `json:"rules"`
		} `json:"groups"`
	}
	readYAML(t, "deploy/prometheus/alerts.yml", &rules)

	rec := &recorder{names: map[string]bool{}}
	srv := streamstest.NewServer(t, streams.Config{})
	conn, _ := srv.Connect()
	st := store.New(nil)
	if _, err := auditor.New(auditor.Options{Conn: conn, Store: st, Metrics: rec}); err != nil {
		t.Fatal(err)
	}
	if _, err := dispatcher.New(dispatcher.Options{Conn: conn, Store: st, Metrics: rec}); err != nil {
		t.Fatal(err)
	}
	metricRE := regexp.MustCompile(`\b(ax_[a-z0-9_]+|jetstream_[a-z_]+)`)
	used := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" || r.Labels["severity"] == "" {
				t.Errorf("group %s: rule %+v needs an alert name, an expr and a severity", g.Name, r)
			}
			for _, name := range metricRE.FindAllString(r.Expr, -1) {
				used[name] = true
				switch {
				case strings.HasPrefix(name, "jetstream_") && !exporterMetrics[name]:
					t.Errorf("alert %s uses %s, which prometheus-nats-exporter -jsz=all does not export", r.Alert, name)
				case strings.HasPrefix(name, "ax_") && !rec.names[name]:
					t.Errorf("alert %s uses %s, which no service registers", r.Alert, name)
				}
			}
		}
	}
	for _, name := range []string{"ax_jetstream_writable", "ax_publish_refusals_total", "ax_dispatcher_batch_failures_total",
		"ax_jetstream_store_used_bytes", "ax_jetstream_store_limit_bytes", "jetstream_server_max_storage"} {
		if !used[name] {
			t.Errorf("no alert rule watches %s", name)
		}
	}

	var prom struct {
		RuleFiles     []string `json:"rule_files"`
		ScrapeConfigs []struct {
			StaticConfigs []struct {
				Targets []string `json:"targets"`
			} `json:"static_configs"`
		} `json:"scrape_configs"`
	}
	readYAML(t, "deploy/prometheus/prometheus.yml", &prom)
	if !slices.Contains(prom.RuleFiles, "alerts.yml") {
		t.Errorf("prometheus.yml loads rule files %v, not alerts.yml", prom.RuleFiles)
	}
	var compose composeFile
	readYAML(t, "docker-compose.yml", &compose)
	if !slices.Contains(compose.Services["prometheus"].Volumes, any("./deploy/prometheus/alerts.yml:/etc/prometheus/alerts.yml:ro")) {
		t.Errorf("docker-compose.yml's prometheus does not mount deploy/prometheus/alerts.yml beside its prometheus.yml")
	}
	cmd := compose.Services["dispatcher"].Command
	i := slices.Index(cmd, "--metrics-addr")
	if i < 0 || i+1 >= len(cmd) {
		t.Fatalf("docker-compose.yml's dispatcher runs %q, serving no metrics", cmd)
	}
	_, port, err := net.SplitHostPort(cmd[i+1])
	if err != nil {
		t.Fatal(err)
	}
	scraped := false
	for _, sc := range prom.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			scraped = scraped || slices.Contains(st.Targets, net.JoinHostPort("dispatcher", port))
		}
	}
	if !scraped {
		t.Errorf("prometheus does not scrape the dispatcher at dispatcher:%s", port)
	}
}
