package worker

import (
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stockflow/stockflow/internal/config"
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

// The start line names the Redis in use, its password redacted, and says when REDIS_URL was not set and
// the default is used (on a shared machine, possibly someone else's Redis).
func TestTheStartLineNamesTheRedisAndWhereItsURLCameFrom(t *testing.T) {
	cases := []struct {
		name                string
		env                 map[string]string
		wantRedis, wantFrom string
	}{
		{"REDIS_URL unset", nil, "redis://127.0.0.1:6379/0", "default"},
		{"REDIS_URL set", map[string]string{"REDIS_URL": "redis://w:hunter2@redis:6379/0"}, "redis://w:xxxxx@redis:6379/0", "REDIS_URL"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			set := config.NewSet("worker", func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			var cfg Config
			Flags(set, &cfg)
			if err := set.Parse(nil); err != nil {
				t.Fatal(err)
			}
			attrs := fmt.Sprint(startAttrs(cfg, set))
			if want := fmt.Sprintf("redis %s redis_url_from %s ", tc.wantRedis, tc.wantFrom); !strings.Contains(attrs, want) || strings.Contains(attrs, "hunter2") {
				t.Errorf("start line attributes %s; want them to hold %q and no password", attrs, want)
			}
		})
	}
}
