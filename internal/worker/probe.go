package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/stockflow/stockflow/internal/config"
)

// ProbeCommand is the first argument that makes the worker binary ask a running worker whether it is
// ready instead of running one: "worker probe", compose.yaml's healthcheck. The image is distroless, with
// no shell or HTTP client to ask /readyz with, so the binary asks it itself.
const ProbeCommand = "probe"

// ProbeTimeout bounds the probe's request: 2 s. /readyz answers within about a second (its checks of Redis
// time out then), so a worker that takes longer is as good as not ready. A healthcheck's own timeout must
// be longer.
const ProbeTimeout = 2 * time.Second

// probe asks the worker on METRICS_ADDR whether it is ready: nil when /readyz answers 200, else why not.
// It asks /readyz, not /healthz: compose's service_healthy, what a dependent waits for, should mean ready
// to take orders (Redis answers, the group exists, reads succeed); /healthz says only that the process
// serves HTTP, also while it waits for Redis. Docker restarts no container that turns unhealthy, so a Redis
// outage makes the workers unhealthy without killing them, as Kubernetes' readiness does.
//
// It reads METRICS_ADDR only, from the environment the worker has (or --metrics-addr), and neither checks
// the other settings nor talks to Redis: the worker checks those, and the probe must tell a running
// worker's state even where they would not pass again (a secret file since rotated). /readyz needs no
// token (METRICS_TOKEN guards /metrics only).
func probe(name string, args []string) error {
	var addr string
	set := config.NewSet(name, os.LookupEnv) // os.LookupEnv given, not nil: the other variables are not checked
	set.NoArguments()
	set.String(&addr, "METRICS_ADDR", "", "the address the worker serves /readyz on, as the worker reads it; without a host (:9090), or on 0.0.0.0 or ::, it is asked on loopback")
	if err := set.Parse(args); err != nil {
		return err
	}
	url, err := probeURL(addr)
	if err != nil {
		return config.Usage(err)
	}
	return askReady(url)
}

// probeURL is the /readyz URL of a worker serving on addr (METRICS_ADDR): on loopback when addr has no host
// or listens on every address (0.0.0.0, ::), on addr's host when it has one (the worker listens there only).
func probeURL(addr string) (string, error) {
	if addr == "" {
		return "", errors.New("METRICS_ADDR is not set: a worker without it serves no /readyz to probe")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return "", fmt.Errorf("invalid METRICS_ADDR %q: want host:port, or :port", addr)
	}
	switch ip := net.ParseIP(host); {
	case host == "" || ip.Equal(net.IPv4zero):
		host = "127.0.0.1"
	case ip.Equal(net.IPv6unspecified):
		host = "::1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/readyz", nil
}

// askReady asks url, within ProbeTimeout: nil for a 200, else an error with what the worker answered (its
// reason, one line) or why nothing answered.
func askReady(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), ProbeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	// No proxy: HTTP_PROXY in a container's environment must not send a request for this host elsewhere.
	client := &http.Client{Transport: &http.Transport{Proxy: nil}}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("no answer from the worker: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	return fmt.Errorf("%s answered %s: %s", url, resp.Status, strings.Join(strings.Fields(string(body)), " "))
}
