package worker

import (
	"os"
	"runtime/debug"
	"testing"
)

// The worker collects garbage at GOGC=400 unless the environment names a GOGC, which it leaves to the Go
// runtime.
func TestTheWorkerSetsGOGCUnlessTheEnvironmentDoes(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	t.Setenv("GOGC", "150") // restored when the test ends
	if got := setGC(); got != "150" {
		t.Errorf("GOGC=150 in the environment: setGC says %s", got)
	}
	if prev := debug.SetGCPercent(100); prev != 100 {
		t.Errorf("GOGC=150 in the environment: setGC set the target to %d", prev)
	}
	if err := os.Unsetenv("GOGC"); err != nil {
		t.Fatal(err)
	}
	if got := setGC(); got != "400" {
		t.Errorf("no GOGC in the environment: setGC says %s, want 400", got)
	}
	if prev := debug.SetGCPercent(100); prev != defaultGOGC {
		t.Errorf("no GOGC in the environment: the target is %d, want %d", prev, defaultGOGC)
	}
}
