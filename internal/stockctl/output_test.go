package stockctl_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/stockflow/stockflow/internal/stockctl"
)

// -o yaml is the JSON document in YAML: the same fields and values (a string that looks like a number
// stays a string); -o json and --json are the same.
func TestOutputYAMLHoldsTheJSONFields(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wantCode(t, e.run("stock", "set", "123", "7"), stockctl.ExitOK)
	var fromJSON, fromYAML, fromO any
	r := e.run("stock", "123", "-o", "yaml")
	wantCode(t, r, stockctl.ExitOK)
	if err := yaml.Unmarshal([]byte(r.stdout), &fromYAML); err != nil || strings.Contains(r.stdout, "{") {
		t.Fatalf("-o yaml: %v, or not in block style:\n%s", err, r.stdout)
	}
	fromYAML = viaJSON(t, fromYAML) // YAML's integers as JSON's numbers
	wantContains(t, "-o yaml", r.stdout, "sku: \"123\"", "available: 7")
	e.runJSON(&fromJSON, "stock", "123")
	if err := json.Unmarshal([]byte(e.run("stock", "123", "-o", "json").stdout), &fromO); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromJSON, fromYAML) || !reflect.DeepEqual(fromJSON, fromO) {
		t.Fatalf("the formats differ:\njson %v\nyaml %v\n-o json %v", fromJSON, fromYAML, fromO)
	}
}

func viaJSON(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}
