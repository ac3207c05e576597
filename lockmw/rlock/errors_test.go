package rlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stockflow/stockflow/lockmw/rlock/internal/redistest"
)

// A failed acquisition reads as one line, says each cause once, and still matches each of them.
func TestErrorsReadAsOneLine(t *testing.T) {
	servers := redistest.StartN(t, 3)
	bg := context.Background()
	reentrant := newLocker(t, servers[0], Config{})
	holder := mustAcquire(t, reentrant, bg, "held")
	defer holder.Release(bg)
	shutdown := errors.New("shutting down")
	cases := []struct {
		name   string
		locker Locker
		ctx    func() (context.Context, context.CancelFunc)
		want   string
		is     []error
	}{
		{"the caller's deadline passes", reentrant, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(bg, 50*time.Millisecond)
		}, "rlock: lock not obtained: context deadline exceeded", []error{ErrNotObtained, context.DeadlineExceeded}},
		{"the caller cancels with a cause", reentrant, func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancelCause(bg)
			time.AfterFunc(50*time.Millisecond, func() { cancel(shutdown) })
			return ctx, func() { cancel(nil) }
		}, "rlock: lock not obtained: context canceled: shutting down", []error{ErrNotObtained, context.Canceled, shutdown}},
		{"the locker's maximum wait passes", newLocker(t, servers[0], Config{MaxWait: 50 * time.Millisecond}),
			func() (context.Context, context.CancelFunc) { return context.WithCancel(bg) },
			"rlock: lock not obtained: waited the maximum of 50ms: context deadline exceeded",
			[]error{ErrNotObtained, context.DeadlineExceeded}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := tc.ctx()
			defer cancel()
			_, err := tc.locker.Acquire(ctx, "held")
			if err == nil || err.Error() != tc.want {
				t.Fatalf("error %q, want %q", err, tc.want)
			}
			for _, target := range tc.is {
				if !errors.Is(err, target) {
					t.Errorf("errors.Is(%q, %v) = false", err, target)
				}
			}
		})
	}
}

// Without a majority, the error names every failed master on the same line, and errors.As finds them.
func TestRedlockQuorumErrorReadsAsOneLine(t *testing.T) {
	servers := redistest.StartN(t, 3)
	l := newRedlock(t, servers, Config{})
	servers[0].Kill()
	servers[1].Kill()
	_, err := l.TryAcquire(context.Background(), "k")
	if err == nil {
		t.Fatal("acquired with 1 of 3 masters")
	}
	msg := err.Error()
	t.Log(msg)
	if strings.Contains(msg, "\n") || strings.Count(msg, "rlock:") != 1 ||
		!strings.HasPrefix(msg, "rlock: lock not obtained: no quorum of Redis masters: node ") ||
		!strings.Contains(msg, "; node ") {
		t.Errorf("error %q: want one line, the package named once, then each failed master", msg)
	}
	if !errors.Is(err, ErrNotObtained) || !errors.Is(err, ErrQuorum) {
		t.Errorf("errors.Is(%q): want ErrNotObtained and ErrQuorum", msg)
	}
	var nodeErr *NodeError
	if !errors.As(err, &nodeErr) || (nodeErr.Addr != servers[0].Addr && nodeErr.Addr != servers[1].Addr) {
		t.Errorf("errors.As(%q, *NodeError) = %v, want a killed master", msg, nodeErr)
	}
}

func TestJoin(t *testing.T) {
	a, b := errors.New("rlock: a"), errors.New("rlock: b")
	wrapsB := fmt.Errorf("c: %w", b)
	for _, tc := range []struct {
		name string
		errs []error
		want string // "" for nil
	}{
		{"nothing is nil", []error{nil, nil}, ""},
		{"one error is itself", []error{nil, a}, "rlock: a"},
		{"the prefix is said once", []error{a, b}, "rlock: a: b"},
		{"an error twice is said once", []error{a, b, b}, "rlock: a: b"},
		{"an error another wraps is left out", []error{a, b, wrapsB}, "rlock: a: c: rlock: b"},
		{"joined errors are flattened", []error{join(a, b), b}, "rlock: a: b"},
		{"the first error leads even when another wraps it", []error{b, wrapsB}, "rlock: b: c: rlock: b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := join(tc.errs...)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("join = %q, want nil", err)
			case tc.want != "" && (err == nil || err.Error() != tc.want):
				t.Fatalf("join = %v, want %q", err, tc.want)
			}
			for _, e := range tc.errs {
				if _, joined := e.(*joinError); e != nil && !joined && !errors.Is(err, e) {
					t.Errorf("errors.Is(%q, %q) = false", err, e)
				}
			}
		})
	}
}
