package worker

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/testkit/redistest"
)

const testToken = "0123456789abcdef-scrape"

// reply is what an endpoint answered; code 0: nothing listens.
type reply struct {
	code   int
	body   string
	header http.Header
}

// get requests url with the Authorization header auth (none when empty).
func get(t *testing.T, url, auth string) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return reply{body: err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{code: resp.StatusCode, body: string(b), header: resp.Header}
}

// freePort returns a port nobody listens on.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

// settings reads the worker's settings from env alone, as Main would from the environment.
func settings(t *testing.T, env map[string]string) Config {
	t.Helper()
	var c Config
	s := config.NewSet("worker", func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	Flags(s, &c)
	if err := s.Parse(nil); err != nil {
		t.Fatal(err)
	}
	return c
}

// runServing runs a worker on s with the settings env and a /metrics that answers "stockflow_test 1",
// until the test ends; it returns once /readyz says ready.
func runServing(t *testing.T, s *redistest.Server, env map[string]string) Config {
	t.Helper()
	env["REDIS_URL"], env["METRICS_ADDR"] = s.URL(), "127.0.0.1:"+freePort(t)
	cfg := settings(t, env)
	metrics := http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) { fmt.Fprintln(rw, "stockflow_test 1") })
	w, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), Options{Locker: NoLock, Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	waitUntil(t, "the worker is ready", func() bool { return get(t, "http://"+cfg.MetricsAddr+"/readyz", "").code == 200 })
	return cfg
}

func TestPprofIsNotOnTheMetricsAddress(t *testing.T) {
	cfg := runServing(t, redistest.Start(t), map[string]string{})
	base := "http://" + cfg.MetricsAddr
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=2", "/debug/pprof/profile?seconds=1"} {
		if r := get(t, base+path, ""); r.code != http.StatusNotFound {
			t.Errorf("%s on METRICS_ADDR: %d, want 404 (profiles only on PPROF_ADDR)", path, r.code)
		}
	}
	if r := get(t, base+"/metrics", ""); r.code != http.StatusOK || !strings.Contains(r.body, "stockflow_test 1") {
		t.Errorf("/metrics without METRICS_TOKEN: %d %q, want 200 and the metrics without a token", r.code, r.body)
	}
}

func TestPprofAddrServesOnlyProfilesOnLoopback(t *testing.T) {
	port := freePort(t)
	cfg := runServing(t, redistest.Start(t), map[string]string{"PPROF_ADDR": ":" + port})
	pprofBase := "http://127.0.0.1:" + port
	cases := []struct {
		name, url string
		want      int
	}{
		{"the profile index is served", pprofBase + "/debug/pprof/", 200},
		{"a goroutine dump is served", pprofBase + "/debug/pprof/goroutine?debug=1", 200},
		{"the command line (flags, URLs) is not served", pprofBase + "/debug/pprof/cmdline", 404},
		{"metrics are not served with the profiles", pprofBase + "/metrics", 404},
		{"probes are not served with the profiles", pprofBase + "/readyz", 404},
		{"profiles are still not served on METRICS_ADDR", "http://" + cfg.MetricsAddr + "/debug/pprof/", 404},
	}
	for _, tc := range cases {
		if r := get(t, tc.url, ""); r.code != tc.want {
			t.Errorf("%s: GET %s = %d, want %d", tc.name, tc.url, r.code, tc.want)
		}
	}
	if ip := nonLoopbackIP(); ip == "" {
		t.Log("no non-loopback address on this host: cannot check that :port stays off the network")
	} else if r := get(t, "http://"+net.JoinHostPort(ip, port)+"/debug/pprof/", ""); r.code != 0 {
		t.Errorf("PPROF_ADDR :%s answers on %s (%d): want loopback only", port, ip, r.code)
	}
}

// nonLoopbackIP is an IPv4 address of this host other than loopback, "" when it has none.
func nonLoopbackIP() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return ""
}

func TestMetricsTokenGuardsMetricsOnly(t *testing.T) {
	s := redistest.Start(t)
	cfg := runServing(t, s, map[string]string{"METRICS_TOKEN": testToken})
	base := "http://" + cfg.MetricsAddr
	refused := []struct{ name, auth string }{
		{"no Authorization header", ""},
		{"a wrong token", "Bearer 0123456789abcdef-scrapf"},
		{"a prefix of the token", "Bearer " + testToken[:16]},
		{"the token with another scheme", "Basic " + testToken},
		{"the bare token", testToken},
	}
	for _, tc := range refused {
		r := get(t, base+"/metrics", tc.auth)
		if r.code != http.StatusUnauthorized || !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") || strings.Contains(r.body, "stockflow_test") {
			t.Errorf("/metrics with %s: %d, WWW-Authenticate %q, body %q; want 401 with a Bearer challenge and no metrics",
				tc.name, r.code, r.header.Get("WWW-Authenticate"), r.body)
		}
	}
	for _, auth := range []string{"Bearer " + testToken, "bearer " + testToken} {
		if r := get(t, base+"/metrics", auth); r.code != http.StatusOK || !strings.Contains(r.body, "stockflow_test 1") {
			t.Errorf("/metrics with %q: %d %q, want 200 and the metrics", auth[:7], r.code, r.body)
		}
	}
	if r := get(t, base+"/healthz", ""); r.code != http.StatusOK {
		t.Errorf("/healthz without a token: %d, want 200 (kubelet probes carry no token)", r.code)
	}
	if r := get(t, base+"/readyz", ""); r.code != http.StatusOK {
		t.Errorf("/readyz without a token: %d, want 200", r.code)
	}
	rdb := s.Client()
	rdb.ConfigSet(context.Background(), "maxmemory-policy", "allkeys-lru")
	defer rdb.ConfigSet(context.Background(), "maxmemory-policy", "noeviction")
	if r := get(t, base+"/readyz", ""); r.code != http.StatusServiceUnavailable || !strings.Contains(r.body, "allkeys-lru") {
		t.Errorf("/readyz without a token on an evicting Redis: %d %q, want 503 naming the policy", r.code, r.body)
	}
}

func TestPprofListenAddr(t *testing.T) {
	cases := []struct{ name, addr, want string }{
		{"an address without a host listens on loopback", ":6060", "127.0.0.1:6060"},
		{"an explicit host is kept", "0.0.0.0:6060", "0.0.0.0:6060"},
		{"an IPv6 host is kept", "[::1]:6060", "[::1]:6060"},
		{"empty stays off", "", ""},
	}
	for _, tc := range cases {
		if got := pprofListenAddr(tc.addr); got != tc.want {
			t.Errorf("%s: pprofListenAddr(%q) = %q, want %q", tc.name, tc.addr, got, tc.want)
		}
	}
}

func TestMetricsTokenIsNeverShown(t *testing.T) {
	short := "hunter2-secret"
	err := settings(t, map[string]string{"METRICS_TOKEN": short}).Validate()
	if err == nil || !strings.Contains(err.Error(), "METRICS_TOKEN") || !strings.Contains(err.Error(), "16") {
		t.Fatalf("a %d-character token: %v, want an error naming METRICS_TOKEN and the minimum", len(short), err)
	}
	if strings.Contains(err.Error(), short) {
		t.Fatalf("the refusal shows the token: %v", err)
	}
	// The flag package prints each flag's value (here the environment's) as its default in the usage text.
	var usage bytes.Buffer
	s := config.NewSet("worker", func(k string) (string, bool) { return testToken, k == "METRICS_TOKEN" })
	var c Config
	Flags(s, &c)
	s.SetOutput(&usage)
	if err := s.Parse([]string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	if !strings.Contains(usage.String(), "-metrics-token") || strings.Contains(usage.String(), testToken) {
		t.Fatalf("usage text lacks --metrics-token or shows the token:\n%s", usage.String())
	}
	if c.MetricsToken != testToken {
		t.Fatalf("METRICS_TOKEN read as %q", c.MetricsToken)
	}
}

// A METRICS_ADDR the worker cannot listen on (another process has it) fails Run at once, with the address:
// a worker without its probes would never be ready, and say why only in its log.
func TestRunFailsWhenItCannotServeItsProbes(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfg := settings(t, map[string]string{"REDIS_URL": redistest.Start(t).URL(), "METRICS_ADDR": taken.Addr().String()})
	w, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), Options{Locker: NoLock})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(context.Background()) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), taken.Addr().String()) {
			t.Fatalf("Run: %v; want the address it could not listen on", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not fail on a METRICS_ADDR in use")
	}
}
