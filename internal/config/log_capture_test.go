package config

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
)

// The lines that go-redis, OpenTelemetry and the log package write on their own become records of the
// binary's JSON log, as warnings naming where they came from.
func TestCaptureLogsMakesEveryLibraryLineAJSONRecord(t *testing.T) {
	var buf bytes.Buffer
	CaptureLogs(Logger(&buf, slog.LevelInfo))
	t.Cleanup(func() {
		log.SetOutput(os.Stderr)
		log.SetFlags(log.LstdFlags)
		CaptureLogs(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	})
	log.Print("from the log package")
	otel.Handle(errors.New("traces export: connection refused"))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Close() // nothing listens there: go-redis's pool logs that it cannot dial
	rdb := redis.NewClient(&redis.Options{Addr: l.Addr().String(), MaxRetries: -1})
	defer rdb.Close()
	if err := rdb.Ping(context.Background()).Err(); err == nil {
		t.Fatal("a Redis answered where none listens")
	}

	want := map[string]string{"from the log package": "log", "traces export: connection refused": "opentelemetry"}
	fromRedis := false
	for line := range strings.Lines(buf.String()) {
		var rec struct{ Level, Msg, Component string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("a line that is not JSON: %q", line)
		}
		if rec.Component == "go-redis" && rec.Level == "WARN" {
			fromRedis = true
			continue
		}
		if want[rec.Msg] != rec.Component || rec.Level != "WARN" {
			t.Errorf("record %+v: want a warning from %q", rec, want[rec.Msg])
		}
		delete(want, rec.Msg)
	}
	if len(want) > 0 || !fromRedis {
		t.Errorf("no record of %v (or of go-redis: %v) in:\n%s", want, fromRedis, buf.String())
	}
}
