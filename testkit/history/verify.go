package history

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
)

// VisualizationDirEnv names the environment variable that tells Verify where to write the
// visualizations of a failed check; without it they go to the test's t.TempDir(), which the test removes.
const VisualizationDirEnv = "STOCKFLOW_HISTORY_DIR"

// Verify loads the history files at paths and checks them against the initial stock with
// DefaultTimeout. It fails t when a file cannot be loaded, when nothing was recorded (a test that
// recorded nothing proves nothing), when a SKU is not linearizable or its check timed out, or when a
// fencing rule broke; a failure prints the report and writes porcupine's visualization of each failing
// SKU (see VisualizationDirEnv). Tests that accept a timed-out check can use Load and Check instead.
func Verify(t testing.TB, paths []string, initial map[string]int64) Report {
	t.Helper()
	h, err := Load(paths...)
	if err != nil {
		t.Fatalf("%v", err)
	}
	if len(h.Ops) == 0 {
		t.Fatalf("history: no stock operations recorded in %s", strings.Join(paths, ", "))
	}
	r := Check(h, initial, 0)
	if r.OK() {
		t.Logf("%s", r)
		return r
	}
	dir := os.Getenv(VisualizationDirEnv)
	if dir == "" {
		dir = t.TempDir()
	}
	files, err := r.WriteVisualizations(dir)
	msg := fmt.Sprintf("visualizations: %s (set %s to keep them)", strings.Join(files, ", "), VisualizationDirEnv)
	if err != nil {
		msg = fmt.Sprintf("writing the visualizations: %v", err)
	}
	t.Errorf("history check failed:\n%s\n%s", r, msg)
	return r
}

// WriteVisualizations writes porcupine's HTML view of every SKU that failed a check (not linearizable,
// timed out, or with a fencing violation) into dir, creating it, and returns the files' paths. Lock
// holds, refused operations and fencing violations appear as annotations.
func (r Report) WriteVisualizations(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	var files []string
	for i := range r.SKUs {
		s := &r.SKUs[i]
		vs := forSKU(r.Violations, s.SKU)
		if s.Result == porcupine.Ok && len(vs) == 0 {
			continue
		}
		info := s.info // AddAnnotations must not touch the report's copy
		info.AddAnnotations(s.annotations(vs))
		path := filepath.Join(dir, "history-"+unsafeChars.ReplaceAllString(s.SKU, "_")+".html")
		if err := porcupine.VisualizePath(s.model.forPorcupine(), info, path); err != nil {
			return files, fmt.Errorf("history: visualizing %s: %w", s.SKU, err)
		}
		files = append(files, path)
	}
	return files, nil
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9._-]`)

// annotations shows next to the checked operations what the check left out of porcupine's history but a
// reader needs: the lock holds (a row per worker), the refused operations and the fencing violations.
func (s *SKUReport) annotations(vs []Violation) []porcupine.Annotation {
	var as []porcupine.Annotation
	for _, h := range s.holds {
		a := porcupine.Annotation{Tag: "lock " + h.Worker, Start: h.Acquired.UnixNano(),
			End: h.Released.UnixNano(), Description: fmt.Sprintf("token %d", h.Token), Details: h.String(),
			BackgroundColor: "#cce5ff"}
		if h.Released.IsZero() {
			a.End, a.Description = a.Start, a.Description+", never released"
		}
		as = append(as, a)
	}
	for _, op := range s.refused {
		as = append(as, porcupine.Annotation{Tag: "refused", Start: op.Invoked.UnixNano(),
			End: op.Returned.UnixNano(), Description: op.describe(), Details: op.details(),
			BackgroundColor: "#dddddd"})
	}
	for _, v := range vs {
		as = append(as, porcupine.Annotation{Tag: "fencing violations", Start: v.Write.Invoked.UnixNano(),
			End: v.Write.Returned.UnixNano(), Description: string(v.Rule), Details: v.String(),
			BackgroundColor: "#ff9999"})
	}
	return as
}
