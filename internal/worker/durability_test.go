package worker

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/stockflow/stockflow/testkit/redistest"
)

// The worker warns about a stock Redis that may lose acknowledged writes in a crash, refuses it with
// REQUIRE_DURABLE, and accepts one that fsyncs every write or whose writes replicas acknowledge.
func TestDurabilityOfTheStockRedisIsCheckedAtStart(t *testing.T) {
	volatile := redistest.Start(t)                              // no persistence
	fsynced := redistest.Start(t, redistest.WithPersistence())  // appendonly yes, appendfsync always
	everysec := redistest.Start(t, redistest.WithPersistence()) // then set to everysec
	if err := everysec.Client().ConfigSet(context.Background(), "appendfsync", "everysec").Err(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		s       *redistest.Server
		require bool
		acks    int
		warn    string // in the warning; "" for none
		refuse  bool
	}{
		{"no persistence is warned about", volatile, false, 0, "appendonly no", false},
		{"no persistence is refused with REQUIRE_DURABLE", volatile, true, 0, "", true},
		{"appendfsync everysec is warned about", everysec, false, 0, "appendfsync everysec", false},
		{"appendfsync everysec is refused with REQUIRE_DURABLE", everysec, true, 0, "", true},
		{"appendfsync always passes", fsynced, true, 0, "", false},
		{"replica acks pass without persistence", volatile, true, 1, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log syncBuffer
			cfg := validConfig(t)
			cfg.RedisURL, cfg.RequireDurable, cfg.Replicas.Acks = tc.s.URL(), tc.require, tc.acks
			w, err := New(cfg, slog.New(slog.NewJSONHandler(&log, nil)), Options{Locker: NoLock})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			err = w.checkDurability(context.Background())
			if refused := errors.Is(err, errNotDurable); refused != tc.refuse || (err != nil && !refused) {
				t.Fatalf("checkDurability: %v, want refused %v", err, tc.refuse)
			}
			if tc.refuse && !refusesToStart(err) {
				t.Fatal("a refusal is retried instead of stopping the start")
			}
			warned := strings.Contains(log.String(), "may lose acknowledged reservations")
			if warned != (tc.warn != "") || !strings.Contains(log.String(), tc.warn) {
				t.Fatalf("log %q, want a warning naming %q: %v", log.String(), tc.warn, tc.warn != "")
			}
		})
	}
}

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
