package kubernetes

import (
	"bytes"
	"flag"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"sigs.k8s.io/yaml"
)

// The alert rules have one home, deploy/prometheus/alerts.yml, where promtool's unit tests run them
// (internal/e2e). prometheusrule.yaml is made from it: go test -run TestThePrometheusRule -update.

var update = flag.Bool("update", false, "write prometheusrule.yaml from deploy/prometheus/alerts.yml")

const (
	alertsFile = "../prometheus/alerts.yml"
	ruleFile   = "prometheusrule.yaml"
)

// ruleHead is what prometheusrule.yaml holds before the rule groups of alerts.yml.
const ruleHead = `# GENERATED from deploy/prometheus/alerts.yml by ` + "`go test -run TestThePrometheusRule -update`" + ` in
# deploy/kubernetes: edit alerts.yml (where promtool's unit tests run the rules), then generate this again.
# The Prometheus Operator loads it into the Prometheus instances whose ruleSelector selects its labels
# (kube-prometheus-stack selects release: <its release> unless ruleSelectorNilUsesHelmValues is false): add
# that label in your overlay. The rules select job="stockflow-worker", which servicemonitor.yaml sets.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: stockflow-worker
spec:
`

// prometheusRule is prometheusrule.yaml made from alerts.yml: its rule groups, without its leading
// comment, indented under spec.
func prometheusRule(alerts []byte) []byte {
	var out bytes.Buffer
	out.WriteString(ruleHead)
	body := string(alerts)
	for strings.HasPrefix(body, "#") {
		_, body, _ = strings.Cut(body, "\n")
	}
	for _, line := range strings.SplitAfter(body, "\n") {
		if strings.TrimSpace(line) != "" {
			out.WriteString("  ")
		}
		out.WriteString(line)
	}
	return out.Bytes()
}

// alertsSpec is alerts.yml decoded strictly as a PrometheusRule's spec.
func alertsSpec(t *testing.T, alerts []byte) monitoringv1.PrometheusRuleSpec {
	t.Helper()
	var spec monitoringv1.PrometheusRuleSpec
	if err := yaml.UnmarshalStrict(alerts, &spec); err != nil {
		t.Fatalf("%s is not a PrometheusRule's spec: %v", alertsFile, err)
	}
	return spec
}

func TestThePrometheusRuleIsTheAlertRulesOfAlertsYml(t *testing.T) {
	alerts := read(t, alertsFile)
	if *update {
		if err := os.WriteFile(ruleFile, prometheusRule(alerts), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(read(t, ruleFile), prometheusRule(alerts)) {
		t.Fatalf("%s is not what %s makes: go test -run TestThePrometheusRule -update", ruleFile, alertsFile)
	}
	b := render(t)
	if !reflect.DeepEqual(b.prometheusRule.Spec, alertsSpec(t, alerts)) {
		t.Fatalf("the rendered PrometheusRule's rules differ from %s's", alertsFile)
	}
	if n := len(b.prometheusRule.Spec.Groups); n == 0 || len(b.prometheusRule.Spec.Groups[0].Rules) < 10 {
		t.Fatalf("the PrometheusRule holds %d groups: want alerts.yml's rules", n)
	}
	t.Run("a threshold changed in alerts.yml alone is reported", func(t *testing.T) {
		changed := bytes.Replace(alerts, []byte("> 0.5 and"), []byte("> 1 and"), 1)
		if bytes.Equal(changed, alerts) || reflect.DeepEqual(b.prometheusRule.Spec, alertsSpec(t, changed)) ||
			bytes.Equal(read(t, ruleFile), prometheusRule(changed)) {
			t.Fatal("a rule changed in alerts.yml and not in prometheusrule.yaml passes the comparison")
		}
	})
}

// The rules select the job the ServiceMonitor gives the workers' series.
func TestTheAlertRulesSelectTheServiceMonitorsJob(t *testing.T) {
	b := render(t)
	var job string
	for _, e := range b.serviceMonitor.Spec.Endpoints {
		for _, r := range e.RelabelConfigs {
			if r.TargetLabel == "job" && r.Replacement != nil && len(r.SourceLabels) == 0 {
				job = *r.Replacement
			}
		}
	}
	if job == "" {
		t.Fatal("the ServiceMonitor does not set the job label: the operator names it after the Service, which the alerts do not select")
	}
	selects := regexp.MustCompile(`job="([^"]*)"`)
	n := 0
	for _, g := range b.prometheusRule.Spec.Groups {
		for _, r := range g.Rules {
			for _, m := range selects.FindAllStringSubmatch(r.Expr.String(), -1) {
				n++
				if m[1] != job {
					t.Errorf("%s selects job %q, the ServiceMonitor's job is %q", r.Alert, m[1], job)
				}
			}
		}
	}
	if n == 0 {
		t.Error("no alert rule selects a job: StockflowWorkerDown should")
	}
}
