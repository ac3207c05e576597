package stockctl_test

import (
	"strings"
	"testing"

	"github.com/stockflow/stockflow/internal/stockctl"
)

// --version prints the build (on standard output, wherever the flag stands) and exits 0; -h names the
// value of each flag.
func TestVersionAndPlaceholders(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--version"}, {"stock", "SKU-1", "--version"}} {
		r := runArgs(t, args...)
		wantCode(t, r, stockctl.ExitOK)
		if !strings.HasPrefix(r.stdout, "stockctl github.com/stockflow/stockflow ") || !strings.Contains(r.stdout, ", commit ") {
			t.Errorf("%q printed %q, want the module and the commit", args, r.stdout)
		}
	}
	r := runArgs(t, "-h")
	wantContains(t, "-h", r.stdout, "  --redis-url url (env REDIS_URL", "  --timeout duration (", "  --output format (-o, ",
		"  --json\n", "  --version\n")
	wantContains(t, "poison replay -h", runArgs(t, "poison", "replay", "-h").stdout, "  --id id\n", "  --reason-contains text\n")
	wantContains(t, "pending -h", runArgs(t, "pending", "-h").stdout, "  --limit n (", "  --partition n\n")
}
