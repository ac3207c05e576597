package e2e

import (
	"bytes"
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The alert rules are held to their unit tests (deploy/prometheus/alerts_test.yml, run by promtool) and to
// their runbooks (a section of docs/operations.md per alert, which its runbook_url leads to).

const (
	alertTestsFile       = deployDir + "/prometheus/alerts_test.yml"
	ensurePromtoolScript = "../../scripts/ensure-promtool.sh"
	// runbookBase is where every runbook_url of alerts.yml points: the sections of docs/operations.md.
	runbookBase = "https://github.com/stockflow/stockflow/blob/main/docs/operations.md#"
)

// promtool returns the path of promtool, which scripts/ensure-promtool.sh installs when it can (as root on
// Debian). Without it the test skips saying why, but fails under CI=true: there the unit tests of the alert
// rules must run.
func promtool(t *testing.T) string {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command("bash", ensurePromtoolScript)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err == nil {
		return strings.TrimSpace(string(out))
	}
	msg := fmt.Sprintf("promtool is missing and %s could not install it (%v): %s", ensurePromtoolScript, err, strings.TrimSpace(stderr.String()))
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// promtool checks the rules and runs their unit tests; a rule whose threshold changed fails its tests.
func TestPromtoolChecksAndTestsTheAlertRules(t *testing.T) {
	bin := promtool(t)
	for _, args := range [][]string{{"check", "rules", alertRulesFile}, {"test", "rules", alertTestsFile}} {
		if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	t.Run("a changed threshold fails the unit tests", func(t *testing.T) {
		dir := t.TempDir()
		rules := strings.Replace(string(readFile(t, alertRulesFile)), "> 0.5 and", "> 1 and", 1)
		if !strings.Contains(string(readFile(t, alertRulesFile)), "> 0.5 and") {
			t.Fatalf("%s has no lock wait objective of 0.5 s to change", alertRulesFile)
		}
		for name, text := range map[string]string{"alerts.yml": rules, "alerts_test.yml": string(readFile(t, alertTestsFile))} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		out, err := exec.Command(bin, "test", "rules", filepath.Join(dir, "alerts_test.yml")).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "StockflowLockWaitP99High") {
			t.Fatalf("promtool test rules with the lock wait objective at 1 s: %v\n%s", err, out)
		}
	})
}

// alertUnitTests is what alerts_test.yml expects of each alert at each evaluation.
type alertUnitTests struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		AlertRuleTest []struct {
			Alertname string `yaml:"alertname"`
			ExpAlerts []any  `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// Every alert has a runbook_url that leads to its own section of docs/operations.md, and unit tests in
// which it fires and in which it does not.
func TestAlertsHaveRunbooksAndUnitTests(t *testing.T) {
	rulesText, testsText := readFile(t, alertRulesFile), readFile(t, alertTestsFile)
	ops := doc(t, "operations.md")
	if problems := alertProblems(t, rulesText, testsText, ops); len(problems) > 0 {
		t.Fatalf("%s:\n%s", alertRulesFile, strings.Join(problems, "\n"))
	}
	breaks := []struct{ name, rules, tests, ops, named string }{
		{name: "a runbook_url without its section", rules: strings.Replace(string(rulesText), "#stockflowlocklost", "#stockflowlockgone", 1), named: "#stockflowlockgone"},
		{name: "an alert without a runbook_url", rules: strings.Replace(string(rulesText), "runbook_url:", "runbook:", 1), named: "StockflowWorkerDown has no runbook_url"},
		{name: "a runbook section removed", ops: strings.Replace(ops, "### StockflowPoisonRate", "### Poison", 1), named: "#stockflowpoisonrate"},
		{name: "an alert that no unit test fires", tests: strings.ReplaceAll(string(testsText), "alertname: StockflowLockLost", "alertname: X"), named: "StockflowLockLost"},
	}
	for _, b := range breaks {
		t.Run(b.name+" is reported", func(t *testing.T) {
			rules, tests, opsText := []byte(cmp.Or(b.rules, string(rulesText))), []byte(cmp.Or(b.tests, string(testsText))), cmp.Or(b.ops, ops)
			problems := alertProblems(t, rules, tests, opsText)
			if !strings.Contains(strings.Join(problems, "\n"), b.named) {
				t.Fatalf("the check reported %q; want a problem naming %s", problems, b.named)
			}
		})
	}
}

// alertProblems lists the alerts without a runbook section or without unit tests both ways.
func alertProblems(t *testing.T, rulesText, testsText []byte, ops string) []string {
	t.Helper()
	var rules alertRules
	var tests alertUnitTests
	if err := yaml.Unmarshal(rulesText, &rules); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(testsText, &tests); err != nil {
		t.Fatal(err)
	}
	sections := anchors(ops)
	var problems []string
	if !slices.Contains(tests.RuleFiles, "alerts.yml") {
		problems = append(problems, alertTestsFile+" does not test alerts.yml")
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			url, ok := r.Annotations["runbook_url"]
			anchor, under := strings.CutPrefix(url, runbookBase)
			switch {
			case !ok:
				problems = append(problems, r.Alert+" has no runbook_url")
			case !under || !sections[anchor] || anchor != strings.ToLower(r.Alert):
				problems = append(problems, fmt.Sprintf("%s: runbook_url %s is not %s#%s, a section of docs/operations.md", r.Alert, url, runbookBase, strings.ToLower(r.Alert)))
			}
			problems = append(problems, unitTestProblems(r.Alert, tests)...)
		}
	}
	return problems
}

// unitTestProblems: some evaluation of the unit tests expects alert to fire, and some expects it not to.
func unitTestProblems(alert string, tests alertUnitTests) []string {
	var fires, quiet bool
	for _, tc := range tests.Tests {
		for _, at := range tc.AlertRuleTest {
			if at.Alertname == alert {
				fires, quiet = fires || len(at.ExpAlerts) > 0, quiet || len(at.ExpAlerts) == 0
			}
		}
	}
	var problems []string
	if !fires {
		problems = append(problems, fmt.Sprintf("%s: no unit test of %s makes it fire", alert, alertTestsFile))
	}
	if !quiet {
		problems = append(problems, fmt.Sprintf("%s: no unit test of %s checks that it stays quiet", alert, alertTestsFile))
	}
	return problems
}
