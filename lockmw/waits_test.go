package lockmw

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/stockflow/stockflow/lockmw/rlock"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// waitLog is a WaitRecorder that keeps what it is told.
type waitLog struct {
	mu    sync.Mutex
	waits []Wait
	ctxs  []context.Context
}

func (l *waitLog) RecordWait(ctx context.Context, w Wait) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.waits, l.ctxs = append(l.waits, w), append(l.ctxs, ctx)
}

type ctxMark struct{}

// Middleware.Waits is told the wait of every message whose handler succeeds, on the acquired and the
// elided path, with the message's own context; a handler's batch records each of its other messages
// through the section (Section.RecordWait), and a failed handler records nothing.
func TestMiddlewareTellsWaitsEveryRecordedWait(t *testing.T) {
	s := redistest.Start(t)
	l, err := rlock.NewReentrant(s.Client(), rlock.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	log := &waitLog{}
	var ways Ways
	mw := &Middleware{Locker: l, Waits: log} // the keys come with each message (WithKeys)
	follower := message.NewMessage("f", []byte("SKU-1"))
	follower.SetContext(context.WithValue(context.Background(), ctxMark{}, "follower"))
	h := mw.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		if msg.UUID == "fails" {
			return nil, context.Canceled
		}
		if sec, _ := SectionFrom(msg.Context()); msg.UUID == "leader" {
			sec.RecordWait(follower.Context(), Wait{Keys: []string{"SKU-1"}, From: sec.Since.Add(-time.Second), Until: sec.Start, Path: PathBatched})
		}
		return nil, nil
	})
	run := func(uuid, sku string) {
		msg := message.NewMessage(uuid, []byte(sku))
		msg.SetContext(WithKeys(context.WithValue(context.Background(), ctxMark{}, uuid), []string{sku}, ways))
		_, _ = h(msg)
	}
	run("leader", "SKU-1")
	run("fails", "SKU-2")
	ways = MayElide
	run("elided", "SKU-3")

	var got []string
	for i, w := range log.waits {
		got = append(got, string(w.Path)+" "+w.Keys[0]+" "+log.ctxs[i].Value(ctxMark{}).(string))
	}
	want := []string{"batched SKU-1 follower", "acquired SKU-1 leader", "elided SKU-3 elided"}
	if !slices.Equal(got, want) {
		t.Fatalf("Waits was told %q, want %q", got, want)
	}
	if batched := log.waits[0]; batched.Until.Sub(batched.From) < time.Second {
		t.Fatalf("the batched wait is %v, want the second the handler gave", batched.Until.Sub(batched.From))
	}
}
