package lockmw

import (
	"context"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/stockflow/stockflow/lockmw/rlock"
)

// Path is how a message got the exclusive section of its keys.
type Path string

// The paths. A handler never needs to know which one it runs on; they are for telemetry.
const (
	PathAcquired Path = "acquired" // the lock was taken in Redis (or re-entered by its owner)
	PathHandOff  Path = "handoff"  // the previous holder in this process passed the lease on (rlock cohorts)
	PathElided   Path = "elided"   // the handler's own write took the lock (WithKeys)
	PathBatched  Path = "batched"  // decided inside another message's section (a batch of the same key)
)

// Section is the exclusive section a handler runs in (SectionFrom): its keys, how it was obtained, when
// the message started waiting for it and when it had it, and the leases that hold it (none when elided).
type Section struct {
	Keys         []string
	Path         Path
	Since, Start time.Time
	lease        held         // nil when elided
	waits        WaitRecorder // the middleware's Waits; nil: none
}

// Waited is how long the message waited for the section.
func (s *Section) Waited() time.Duration { return s.Start.Sub(s.Since) }

type sectionKey struct{}

// SectionFrom returns the section the middleware runs the message whose context is ctx in.
func SectionFrom(ctx context.Context) (*Section, bool) {
	s, ok := ctx.Value(sectionKey{}).(*Section)
	return s, ok
}

// WithSection returns ctx carrying sec, as the middleware gives it to the handler: for running a handler
// outside the middleware (its tests, a tool).
func WithSection(ctx context.Context, sec *Section) context.Context {
	return context.WithValue(ctx, sectionKey{}, sec)
}

func newSection(keys []string, lease held, since time.Time) *Section {
	path := PathAcquired
	if l, ok := lease.(rlock.Lease); ok && rlock.StatsOf(l).HandOff {
		path = PathHandOff
	}
	return &Section{Keys: keys, Path: path, Since: since, Start: time.Now(), lease: lease}
}

func (s *Section) wait() Wait { return Wait{Keys: s.Keys, From: s.Since, Until: s.Start, Path: s.Path} }

// Elided reports that no lock is held: the handler's write must take the lock itself, atomically, and
// fail with ErrLocked when it is held.
func (s *Section) Elided() bool { return s.Path == PathElided }

// Leases are the leases that hold the section, sorted by key; none when elided.
func (s *Section) Leases() []rlock.Lease {
	switch l := s.lease.(type) {
	case *rlock.MultiLease:
		return l.Leases()
	case rlock.Lease:
		return []rlock.Lease{l}
	}
	return nil
}

// Token is the fencing token of key's lease: what the handler's writes carry. 0 when the section holds
// no lease of key (elided, or a lock without tokens).
func (s *Section) Token(key string) int64 {
	for _, l := range s.Leases() {
		if l.Key() == key {
			return l.Token()
		}
	}
	return 0
}

type keysKey struct{}

// request is what a step ahead of the middleware asks of it for a message (WithKeys).
type request struct {
	keys []string
	ways Ways
}

// Ways are the ways into the section a message may take besides acquiring its locks (WithKeys).
type Ways uint8

const (
	// MayElide: the message's handler may run without taking the locks first (Section.Elided): its write
	// then takes them itself when nobody holds any, as one atomic step (the stock scripts' lock elision);
	// when the handler fails with ErrLocked (somebody holds one), the middleware takes the locks and runs
	// it again.
	MayElide Ways = 1 << iota
	// MayBatch: a message of one key may be handled in a batch of another message of that key, in that
	// one's section (Batcher), instead of obtaining the section itself.
	MayBatch
)

// WithKeys returns ctx carrying the lock keys of the message it is the context of, and the ways into their
// section it may take, for a step ahead of the middleware that knows them (a decoder): the middleware and
// the Batcher then take them instead of asking Key or Keys.
func WithKeys(ctx context.Context, keys []string, ways Ways) context.Context {
	return context.WithValue(ctx, keysKey{}, request{keys: keys, ways: ways})
}

// KeysFrom returns the lock keys and ways WithKeys put in ctx.
func KeysFrom(ctx context.Context) (keys []string, ways Ways, ok bool) {
	r, ok := ctx.Value(keysKey{}).(request)
	return r.keys, r.ways, ok
}

type sinceKey struct{}

// withWaitingSince notes in ctx when the message started waiting for its section, when that was before
// the middleware (the Batcher ahead of it); the middleware counts the wait from its own start otherwise.
func withWaitingSince(ctx context.Context, t time.Time) context.Context {
	return context.WithValue(ctx, sinceKey{}, t)
}

func waitingSince(ctx context.Context) time.Time {
	if t, ok := ctx.Value(sinceKey{}).(time.Time); ok {
		return t
	}
	return time.Now()
}

// Telemetry of the wait: one histogram for every message, whatever its path, and a "lock wait" span in the
// message's trace that lasts exactly the wait (made by the provider of the message's span).
var (
	meter       = otel.Meter(scope)
	waitHist, _ = meter.Float64Histogram("stockflow.lock.wait", metric.WithUnit("s"),
		metric.WithDescription("Time from a message wanting the exclusive section of its keys until it had it, one per decided message, by path (acquired, handoff, elided, batched)."),
		metric.WithExplicitBucketBoundaries(0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
	pathAttrs = map[Path]metric.RecordOption{}
)

const scope = "github.com/stockflow/stockflow/lockmw"

// SpanWait is the name of the span of a message's wait for its section.
const SpanWait = "lock wait"

// Attributes of the wait, on spans and the histogram (AttrPath only: no per-key metric series).
const (
	AttrPath = attribute.Key("stockflow.lock.path")
	AttrKey  = attribute.Key("stockflow.lock.key")
	AttrWait = attribute.Key("stockflow.lock.wait.seconds")
)

func init() {
	for _, p := range []Path{PathAcquired, PathHandOff, PathElided, PathBatched} {
		pathAttrs[p] = metric.WithAttributeSet(attribute.NewSet(AttrPath.String(string(p))))
	}
}

// Wait is one message's wait for the section of its keys: from when it started waiting until it had the
// section, and the path it took.
type Wait struct {
	Keys        []string
	From, Until time.Time
	Path        Path
}

// WaitRecorder is told each decided message's wait for its section, besides the histogram and the span
// (Middleware.Waits): a view by key, such as the hot SKUs of internal/hot. It runs on the message's path:
// it must be cheap and must not block.
type WaitRecorder interface {
	RecordWait(ctx context.Context, w Wait)
}

// RecordWait records w (RecordWait) and tells the section's WaitRecorder, when the middleware has one: the
// middleware records its messages so, and a handler that decides other messages in its section (a batch)
// records theirs so, with PathBatched and each message's own context.
func (s *Section) RecordWait(ctx context.Context, w Wait) {
	RecordWait(ctx, w)
	if s.waits != nil {
		s.waits.RecordWait(ctx, w)
	}
}

// RecordWait records w for the message whose context is ctx, once per decided message: in the
// stockflow.lock.wait histogram (with the trace as its exemplar), as a "lock wait" span under the span of
// ctx, and as attributes of that span. The middleware records the messages it runs; a handler that decides
// other messages in its section (a batch) records theirs with PathBatched.
func RecordWait(ctx context.Context, w Wait) {
	waited := w.Until.Sub(w.From).Seconds()
	waitHist.Record(ctx, waited, pathAttrs[w.Path]) // recorded even under an ended context (a released lease's)
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{AttrKey.String(strings.Join(w.Keys, ",")), AttrWait.Float64(waited),
		AttrPath.String(string(w.Path))}
	parent.SetAttributes(attrs...)
	_, span := parent.TracerProvider().Tracer(scope).Start(ctx, SpanWait, trace.WithTimestamp(w.From), trace.WithAttributes(attrs...))
	span.End(trace.WithTimestamp(w.Until))
}
