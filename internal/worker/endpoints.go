package worker

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"
)

// serveHTTP serves /metrics and the probes on METRICS_ADDR and the profiles on PPROF_ADDR, each if set,
// until the returned function is called. An address it cannot listen on (in use, not this host's) is an
// error: a worker without its probes would never be ready, and say so only in its log.
func (w *Worker) serveHTTP() (stop func(), err error) {
	stopProbes, err := w.serve("metrics", w.cfg.MetricsAddr, w.httpHandler())
	if err != nil {
		return nil, err
	}
	stopPprof, err := w.serve("pprof", pprofListenAddr(w.cfg.PprofAddr), pprofHandler())
	if err != nil {
		stopProbes()
		return nil, err
	}
	return func() { stopProbes(); stopPprof() }, nil
}

// serve serves h on addr, unless addr is empty, until the returned function is called.
func (w *Worker) serve(name, addr string, h http.Handler) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s server: %w", name, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	w.logger.Info("serving "+name, "addr", ln.Addr().String())
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			w.logger.Error(name+" server", "addr", addr, "err", err)
		}
	}()
	return func() { _ = srv.Close() }, nil
}

// httpHandler serves /metrics (behind METRICS_TOKEN, if set), /healthz and /readyz. Profiles are not
// here: whoever may scrape metrics may not necessarily take stack dumps and CPU profiles.
func (w *Worker) httpHandler() http.Handler {
	mux := http.NewServeMux()
	if w.metrics != nil {
		mux.Handle("/metrics", requireToken(w.cfg.MetricsToken, w.metrics))
	}
	// The probes stay open: kubelet probes carry no token.
	mux.HandleFunc("/healthz", func(rw http.ResponseWriter, _ *http.Request) { fmt.Fprintln(rw, "ok") })
	mux.HandleFunc("/readyz", func(rw http.ResponseWriter, r *http.Request) {
		if err := w.ready(r.Context()); err != nil {
			http.Error(rw, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(rw, "ready")
	})
	return mux
}

// pprofHandler serves the profiles for operators: /debug/pprof/profile?seconds=10 and friends.
// /debug/pprof/cmdline is left out: it shows the command line, --metrics-token or a --redis-url with a
// password included.
func pprofHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// pprofListenAddr is where PPROF_ADDR listens: an address without a host (":6060") on loopback only, so
// that asking for profiles does not open them to the network by accident.
func pprofListenAddr(addr string) string {
	if strings.HasPrefix(addr, ":") {
		return "127.0.0.1" + addr
	}
	return addr
}

// requireToken answers 401 to requests without "Authorization: Bearer <token>" (what Prometheus sends with
// authorization: {credentials: ...}) and passes the others to next; with no token it is next.
func requireToken(token string, next http.Handler) http.Handler {
	if token == "" {
		return next
	}
	// Hashes are compared, not the tokens: ConstantTimeCompare returns early on a length mismatch.
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		got := sha256.Sum256([]byte(bearerToken(r)))
		if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			rw.Header().Set("WWW-Authenticate", "Bearer")
			http.Error(rw, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(rw, r)
	})
}

// bearerToken is the token of the request's "Authorization: Bearer <token>" header, "" without one.
func bearerToken(r *http.Request) string {
	scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return token
}
