package worker

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/testkit/redistest"
)

func TestTheProbeAsksTheWorkersOwnAddress(t *testing.T) {
	cases := []struct{ name, addr, want string }{
		{"an address without a host is asked on loopback", ":9090", "http://127.0.0.1:9090/readyz"},
		{"every IPv4 address is asked on loopback", "0.0.0.0:9090", "http://127.0.0.1:9090/readyz"},
		{"every IPv6 address is asked on IPv6 loopback", "[::]:9090", "http://[::1]:9090/readyz"},
		{"a host the worker listens on only is asked there", "10.1.2.3:9090", "http://10.1.2.3:9090/readyz"},
		{"a host name is kept", "localhost:9090", "http://localhost:9090/readyz"},
	}
	for _, tc := range cases {
		if got, err := probeURL(tc.addr); err != nil || got != tc.want {
			t.Errorf("%s: probeURL(%q) = %q, %v; want %q", tc.name, tc.addr, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "localhost", "127.0.0.1:"} {
		if got, err := probeURL(bad); err == nil || !strings.Contains(err.Error(), "METRICS_ADDR") {
			t.Errorf("probeURL(%q) = %q, %v; want an error naming METRICS_ADDR", bad, got, err)
		}
	}
}

// The probe is /readyz's answer, not /healthz's: a worker on a Redis that may evict keys still answers
// /healthz, and the probe fails with the reason /readyz gives. The worker requires a METRICS_TOKEN, which
// the probe does not send.
func TestTheProbeIsTheWorkersReadiness(t *testing.T) {
	s := redistest.Start(t)
	cfg := runServing(t, s, map[string]string{"METRICS_TOKEN": testToken})
	_, port, _ := net.SplitHostPort(cfg.MetricsAddr)
	args := []string{"--metrics-addr", ":" + port} // as compose.yaml sets it: asked on loopback
	if err := probe("worker probe", args); err != nil {
		t.Fatalf("a ready worker: the probe says %v, want nil", err)
	}
	rdb := s.Client()
	if err := rdb.ConfigSet(context.Background(), "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	defer rdb.ConfigSet(context.Background(), "maxmemory-policy", "noeviction")
	if r := get(t, "http://"+cfg.MetricsAddr+"/healthz", ""); r.code != http.StatusOK {
		t.Fatalf("/healthz on an evicting Redis: %d, want 200 (the probe must not ask it)", r.code)
	}
	err := probe("worker probe", args)
	if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "allkeys-lru") || errors.Is(err, config.ErrUsage) {
		t.Fatalf("a worker on an evicting Redis: the probe says %v; want a failure (not a usage error) with 503 and the policy", err)
	}
}
