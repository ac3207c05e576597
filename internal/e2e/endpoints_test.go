package e2e

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stockflow/stockflow/testkit/redistest"
)

// status returns the status code of GET url with the Authorization header auth (none when empty), 0 when
// nothing answers, and the body.
func status(url, auth string) (int, string) {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The worker binary reads PPROF_ADDR and METRICS_TOKEN from the environment: profiles only on PPROF_ADDR,
// /metrics only with the token, the probes without it, and the token in no log.
func TestMetricsTokenAndPprofAddrOfTheBinary(t *testing.T) {
	s := redistest.Start(t)
	const token = "e2e-scrape-token-0123456789"
	addr, pprofAddr := freeAddr(t), freeAddr(t)
	w := startWorker(t, s, "w0", "METRICS_ADDR="+addr, "PPROF_ADDR="+pprofAddr, "METRICS_TOKEN="+token)
	waitFor(t, 10*time.Second, "the worker is ready (no token)", func() bool { c, _ := readyz(addr); return c == 200 })
	checks := []struct {
		name, url, auth string
		want            int
	}{
		{"metrics without a token are refused", "http://" + addr + "/metrics", "", 401},
		{"metrics with a wrong token are refused", "http://" + addr + "/metrics", "Bearer " + strings.ToUpper(token), 401},
		{"metrics with the token are served", "http://" + addr + "/metrics", "Bearer " + token, 200},
		{"the liveness probe needs no token", "http://" + addr + "/healthz", "", 200},
		{"profiles are not on METRICS_ADDR", "http://" + addr + "/debug/pprof/", "", 404},
		{"profiles are on PPROF_ADDR", "http://" + pprofAddr + "/debug/pprof/", "", 200},
	}
	for _, c := range checks {
		if code, body := status(c.url, c.auth); code != c.want {
			t.Errorf("%s: GET %s = %d (%.200s), want %d", c.name, c.url, code, body, c.want)
		}
	}
	if _, body := status("http://"+addr+"/metrics", "Bearer "+token); !strings.Contains(body, "stockflow_consumer_lag") {
		t.Errorf("/metrics with the token lacks the worker's metrics:\n%.500s", body)
	}
	if strings.Contains(w.logText(), token) {
		t.Errorf("the worker logged METRICS_TOKEN:\n%s", w.logText())
	}
}

// A METRICS_TOKEN that is too short stops the worker with a message naming the setting, not the token; a
// usage error does not show it either.
func TestMetricsTokenRefusalsDoNotShowIt(t *testing.T) {
	s := redistest.Start(t)
	cases := []struct {
		name, token string
		args        []string
		want        string
	}{
		{"a short token", "hunter2-secret", nil, "METRICS_TOKEN"},
		{"an unknown flag", "e2e-scrape-token-0123456789", []string{"--no-such-flag"}, "-no-such-flag"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := startWorkerArgs(t, s, "refused", tc.args, "METRICS_TOKEN="+tc.token)
			err, exited := w.exited(10 * time.Second)
			if !exited || err == nil {
				t.Fatalf("exited %v (%v), want a non-zero exit", exited, err)
			}
			if log := w.logText(); !strings.Contains(log, tc.want) || strings.Contains(log, tc.token) {
				t.Fatalf("output does not name %s, or shows the token:\n%s", tc.want, log)
			}
		})
	}
}
