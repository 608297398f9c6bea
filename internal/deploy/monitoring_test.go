package deploy_test

import (
	"bytes"
	"os"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestChartMonitoringObjects renders the chart with the Prometheus
// Operator's objects on and checks: each executor StatefulSet's
// serviceName is a headless Service of the chart selecting its pods; the
// ServiceMonitor selects the metrics Service, whose port is the pods'
// metrics port; the PrometheusRule holds deploy/prometheus/alerts.yml's
// groups; each workload has a PodDisruptionBudget selecting its pods.
// Without the values the operator's objects are not rendered.
func TestChartMonitoringObjects(t *testing.T) {
	t.Parallel()
	alerts, err := os.ReadFile("../../deploy/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	if copied, err := os.ReadFile(chart + "/files/prometheus-alerts.yml"); err != nil || !bytes.Equal(copied, alerts) {
		t.Errorf("files/prometheus-alerts.yml is not deploy/prometheus/alerts.yml (cp it): %v", err)
	}
	objects := render(t, `
database: {url: "postgres://ax@db/ax"}
monitoring:
  serviceMonitor: {enabled: true, labels: {release: kube-prometheus}}
  prometheusRule: {enabled: true}
executorPools:
  - pool: default
`)
	selects := func(sel object, labels object) bool {
		m, _ := sel.get("matchLabels").(map[string]any)
		if sel.get("matchLabels") == nil {
			m = sel
		}
		for k, v := range m {
			if labels[k] != v {
				return false
			}
		}
		return len(m) > 0
	}
	workloads := map[string]object{}
	for key, o := range objects {
		if strings.HasPrefix(key, "Deployment/") || strings.HasPrefix(key, "StatefulSet/") {
			workloads[o.str("metadata", "name")] = o
		}
	}
	for name, w := range workloads {
		podLabels := object(w.get("spec", "template", "metadata", "labels").(map[string]any))
		if sn := w.str("spec", "serviceName"); sn != "" {
			svc := objects["Service/"+sn]
			if svc == nil || svc.str("spec", "clusterIP") != "None" || !selects(object(svc.get("spec", "selector").(map[string]any)), podLabels) {
				t.Errorf("%s names serviceName %s: no headless Service of the chart selecting its pods (%v)", name, sn, svc)
			}
		}
		pdb := objects["PodDisruptionBudget/"+name]
		if pdb == nil || pdb.get("spec", "maxUnavailable") != float64(1) || !selects(object(pdb.get("spec", "selector").(map[string]any)), podLabels) {
			t.Errorf("%s: no PodDisruptionBudget selecting its pods (%v)", name, pdb)
		}
	}
	if len(workloads) != 5 {
		t.Errorf("%d workloads, want 5", len(workloads))
	}
	metrics := objects["Service/t-ax-metrics"]
	sm := objects["ServiceMonitor/t-ax"]
	if metrics == nil || sm == nil {
		t.Fatalf("metrics Service %v, ServiceMonitor %v", metrics, sm)
	}
	if sm.str("apiVersion") != "monitoring.coreos.com/v1" || sm.str("metadata", "labels", "release") != "kube-prometheus" ||
		!selects(object(sm.get("spec", "selector").(map[string]any)), object(metrics.get("metadata", "labels").(map[string]any))) ||
		sm.str("spec", "endpoints", 0, "port") != metrics.str("spec", "ports", 0, "name") || sm.str("spec", "namespaceSelector", "matchNames", 0) != "ax" {
		t.Errorf("the ServiceMonitor does not scrape the metrics Service: %v", sm)
	}
	for name, w := range workloads {
		podLabels := object(w.get("spec", "template", "metadata", "labels").(map[string]any))
		ports := w.get("spec", "template", "spec", "containers", 0, "ports").([]any)
		if !selects(object(metrics.get("spec", "selector").(map[string]any)), podLabels) ||
			object(ports[0].(map[string]any)).str("name") != metrics.str("spec", "ports", 0, "targetPort") {
			t.Errorf("the metrics Service does not reach %s's metrics port", name)
		}
	}
	var want map[string]any
	if err := yaml.Unmarshal(alerts, &want); err != nil {
		t.Fatal(err)
	}
	rule := objects["PrometheusRule/t-ax"]
	if rule == nil || !reflect.DeepEqual(map[string]any(object(rule.get("spec").(map[string]any))), want) {
		t.Errorf("the PrometheusRule's spec is not deploy/prometheus/alerts.yml: %v", rule)
	}

	plain := render(t, "database: {url: \"postgres://ax@db/ax\"}\n")
	for _, key := range []string{"ServiceMonitor/t-ax", "PrometheusRule/t-ax"} {
		if plain[key] != nil {
			t.Errorf("%s rendered without its value", key)
		}
	}
	if plain["Service/t-ax-executor-default"] == nil {
		t.Error("no Service for the default pool's serviceName")
	}
}
