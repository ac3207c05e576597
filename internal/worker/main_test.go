package worker

import (
	"os"
	"runtime/debug"
	"testing"
)

// The worker collects garbage at GOGC=400 unless the environment names a GOGC, which it leaves to the Go
// runtime (which read it at start: here, SetGCPercent(150) plays that part).
func TestTheWorkerSetsGOGCUnlessTheEnvironmentDoes(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(150))
	t.Setenv("GOGC", "150") // restored when the test ends
	if got := setGC(); got != 150 {
		t.Errorf("GOGC=150 in the environment: setGC says %d", got)
	}
	if prev := debug.SetGCPercent(100); prev != 150 {
		t.Errorf("GOGC=150 in the environment: setGC set the target to %d", prev)
	}
	if err := os.Unsetenv("GOGC"); err != nil {
		t.Fatal(err)
	}
	if got := setGC(); got != defaultGOGC {
		t.Errorf("no GOGC in the environment: setGC says %d, want %d", got, defaultGOGC)
	}
	if prev := debug.SetGCPercent(100); prev != defaultGOGC {
		t.Errorf("no GOGC in the environment: the target is %d, want %d", prev, defaultGOGC)
	}
}
