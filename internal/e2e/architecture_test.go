package e2e

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// docs/architecture.md says what the packages of the order's path import of the product: inventory and the
// lock library nothing, the public Pub/Sub internal/stream (its group reader); handlers the store, the lock middleware and library, and
// internal/stream for its commit (the arrow back up that issue 44 removes); lockmw only the lock library.
// go list holds the page to the code: a new import of the product in one of them fails here until the page
// says so.
func TestTheArchitectureStatementsHoldForTheImports(t *testing.T) {
	const product = "github.com/stockflow/stockflow"
	cases := []struct {
		dir, pkg string
		imports  []string // of the product, sorted
	}{
		{"../..", "./inventory", nil},
		{"../..", "./redisstream", []string{"internal/stream"}},
		{"../../lockmw/rlock", ".", nil},
		{"../..", "./lockmw", []string{"lockmw/rlock"}},
		{"../..", "./handlers", []string{"internal/stream", "inventory", "lockmw", "lockmw/rlock"}},
	}
	for _, tc := range cases {
		out, err := exec.Command("go", "-C", tc.dir, "list", "-f", `{{join .Imports "\n"}}`, tc.pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", tc.pkg, err, out)
		}
		var got []string
		for _, imp := range strings.Fields(string(out)) {
			if rest, ok := strings.CutPrefix(imp, product+"/"); ok && !strings.HasPrefix(rest, "lockmw/rlock/internal") {
				got = append(got, rest)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.imports) {
			t.Errorf("%s imports %v of the product; docs/architecture.md says %v: change the page with the code", tc.pkg, got, tc.imports)
		}
	}
}
