package e2e_test

import (
	"net"
	"os"
	pathpkg "path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// composeFile is the part of docker-compose.yml the monitoring test reads.
type composeFile struct {
	Services map[string]struct {
		Image       string            `json:"image"`
		Command     []string          `json:"command"`
		Volumes     []any             `json:"volumes"` // short strings, or long forms (the secrets' subpaths)
		Environment map[string]string `json:"environment"`
	} `json:"services"`
}

// readYAML decodes the YAML file at name (relative to the repository) into v.
func readYAML(t *testing.T, name string, v any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("../..", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// TestComposeMonitoringIsWired checks that docker-compose.yml's
// prometheus-nats-exporter, Prometheus and Grafana fit together: the
// exporter reads a NATS node's monitoring port with -jsz=all, Prometheus
// scrapes the exporter and the auditor where they listen, Grafana's data
// source is that Prometheus, and its dashboard provider reads the folder
// AX's dashboard is mounted into. (TestDashboardQueriesRegisteredMetrics
// checks the dashboard's queries.)
func TestComposeMonitoringIsWired(t *testing.T) {
	t.Parallel()
	var compose composeFile
	readYAML(t, "docker-compose.yml", &compose)
	for _, name := range []string{"auditor", "nats-exporter", "prometheus", "grafana"} {
		if _, ok := compose.Services[name]; !ok {
			t.Fatalf("docker-compose.yml has no service %s", name)
		}
	}
	// mounts maps each bind-mounted repository path of a service to its
	// path in the container; every such path must exist.
	mounts := func(service string) map[string]string {
		out := map[string]string{}
		for _, vol := range compose.Services[service].Volumes {
			v, ok := vol.(string)
			if !ok {
				continue
			}
			parts := strings.Split(v, ":")
			if !strings.HasPrefix(parts[0], "./") {
				continue
			}
			if _, err := os.Stat(filepath.Join("../..", parts[0])); err != nil {
				t.Errorf("service %s mounts %s, which is not in the repository", service, parts[0])
			}
			out[pathpkg.Clean(parts[0])] = parts[1]
		}
		return out
	}
	// listens returns the port a service listens on, by its flag.
	flagValue := func(service, flag string) string {
		cmd := compose.Services[service].Command
		for i, a := range cmd {
			if v, ok := strings.CutPrefix(a, flag+"="); ok {
				return v
			}
			if a == flag && i+1 < len(cmd) {
				return cmd[i+1]
			}
		}
		return ""
	}

	// The exporter reads a NATS node's monitoring port.
	exporter := compose.Services["nats-exporter"].Command
	if !slices.Contains(exporter, "-jsz=all") {
		t.Errorf("nats-exporter runs %q, without -jsz=all (the consumer metrics)", exporter)
	}
	var natsConf string
	if data, err := os.ReadFile("../../deploy/nats/nats.conf"); err != nil {
		t.Fatal(err)
	} else {
		natsConf = string(data)
	}
	monPort := regexp.MustCompile(`(?m)^http_port:\s*(\d+)`).FindStringSubmatch(natsConf)
	if monPort == nil {
		t.Fatal("deploy/nats/nats.conf opens no monitoring port (http_port)")
	}
	urls := 0
	for _, a := range exporter {
		host, port, ok := strings.Cut(strings.TrimPrefix(a, "http://"), ":")
		if !strings.HasPrefix(a, "http://") || !ok {
			continue
		}
		urls++
		if _, ok := compose.Services[host]; !ok || port != monPort[1] {
			t.Errorf("nats-exporter reads %s: want a NATS service's monitoring port %s", a, monPort[1])
		}
	}
	if urls == 0 {
		t.Errorf("nats-exporter runs %q, with no NATS monitoring URL", exporter)
	}
	exporterPort := flagValue("nats-exporter", "-port")
	if exporterPort == "" {
		exporterPort = "7777" // the exporter's default
	}

	// Prometheus scrapes the exporter and the auditor where they listen.
	promMounts := mounts("prometheus")
	if promMounts["deploy/prometheus/prometheus.yml"] != "/etc/prometheus/prometheus.yml" {
		t.Errorf("prometheus mounts %v, want deploy/prometheus/prometheus.yml as /etc/prometheus/prometheus.yml", promMounts)
	}
	var prom struct {
		ScrapeConfigs []struct {
			JobName       string `json:"job_name"`
			StaticConfigs []struct {
				Targets []string `json:"targets"`
			} `json:"static_configs"`
		} `json:"scrape_configs"`
	}
	readYAML(t, "deploy/prometheus/prometheus.yml", &prom)
	_, auditorPort, err := net.SplitHostPort(flagValue("auditor", "--metrics-addr"))
	if err != nil {
		t.Fatalf("the auditor serves no metrics (--metrics-addr): %v", err)
	}
	want := map[string]string{"auditor": auditorPort, "nats-exporter": exporterPort}
	scraped := map[string]bool{}
	for _, sc := range prom.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			for _, target := range st.Targets {
				host, port, err := net.SplitHostPort(target)
				if err != nil {
					t.Errorf("job %s: target %q: %v", sc.JobName, target, err)
					continue
				}
				if _, ok := compose.Services[host]; !ok {
					t.Errorf("job %s scrapes %s, which is not a service of docker-compose.yml", sc.JobName, target)
				}
				if p, ok := want[host]; ok && p != port {
					t.Errorf("job %s scrapes %s, but %s listens on port %s", sc.JobName, target, host, p)
				}
				scraped[host] = true
			}
		}
	}
	for host := range want {
		if !scraped[host] {
			t.Errorf("prometheus does not scrape %s", host)
		}
	}

	// Grafana: the data source is that Prometheus, the dashboard is where
	// the provider looks.
	gm := mounts("grafana")
	if gm["deploy/grafana/provisioning"] != "/etc/grafana/provisioning" {
		t.Errorf("grafana mounts %v, want deploy/grafana/provisioning as /etc/grafana/provisioning", gm)
	}
	var ds struct {
		Datasources []struct {
			Type, URL string
			IsDefault bool `json:"isDefault"`
		} `json:"datasources"`
	}
	readYAML(t, "deploy/grafana/provisioning/datasources/prometheus.yaml", &ds)
	if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" || !ds.Datasources[0].IsDefault ||
		ds.Datasources[0].URL != "http://prometheus:9090" {
		t.Errorf("grafana's data sources = %+v, want the default one of type prometheus at http://prometheus:9090", ds.Datasources)
	}
	var dash struct {
		Providers []struct {
			Type    string
			Options struct{ Path string }
		} `json:"providers"`
	}
	readYAML(t, "deploy/grafana/provisioning/dashboards/ax.yaml", &dash)
	dashboard, ok := gm["deploy/grafana/ax.json"]
	if !ok {
		t.Fatal("grafana does not mount deploy/grafana/ax.json")
	}
	if len(dash.Providers) != 1 || dash.Providers[0].Type != "file" || pathpkg.Dir(dashboard) != dash.Providers[0].Options.Path {
		t.Errorf("grafana's dashboard providers = %+v, want one of type file reading %s", dash.Providers, pathpkg.Dir(dashboard))
	}
	if home := compose.Services["grafana"].Environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]; home != "" && home != dashboard {
		t.Errorf("grafana's home dashboard is %s, not AX's %s", home, dashboard)
	}
}
