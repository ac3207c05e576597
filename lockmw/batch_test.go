package lockmw

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/stockflow/stockflow/lockmw/rlock"
)

// batchMessage is a message of key that may be batched.
func batchMessage(uuid, key string) *message.Message {
	msg := message.NewMessage(uuid, nil)
	msg.SetContext(WithKeys(context.Background(), []string{key}, MayBatch))
	return msg
}

// waitFor waits until n messages of key wait in b.
func waitFor(t *testing.T, b *Batcher, key string, n int) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); b.Waiting(key) < n; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%d messages of %s waiting, want %d", b.Waiting(key), key, n)
		}
	}
}

// The first message of a key leads: its handler runs, and takes the messages that arrived meanwhile in a
// batch; they return the batch's outcome without running the handler. A message without MayBatch, or of
// several keys, passes through.
func TestTheLeaderHandlesTheBatchOfItsFollowers(t *testing.T) {
	b := &Batcher{}
	gate := make(chan struct{})
	var mu sync.Mutex
	var ran []string
	var taken []string
	h := b.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		mu.Lock()
		ran = append(ran, msg.UUID)
		mu.Unlock()
		if msg.UUID != "leader" {
			return nil, nil
		}
		<-gate // the followers arrive while the leader waits for its section
		batch := b.Take("k", 10)
		for _, q := range batch {
			taken = append(taken, q.Msg.UUID)
		}
		b.Done("k", msg, batch, errors.New("the batch's outcome"))
		return nil, nil
	})
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i, uuid := range []string{"leader", "f1", "f2"} {
		wg.Go(func() { _, errs[i] = h(batchMessage(uuid, "k")) })
		waitFor(t, b, "k", i+1)
	}
	close(gate)
	wg.Wait()
	if !slices.Equal(ran, []string{"leader"}) || !slices.Equal(taken, []string{"leader", "f1", "f2"}) {
		t.Fatalf("ran %v, the leader took %v; want the leader alone to run, taking all three", ran, taken)
	}
	if errs[0] != nil || errs[1] == nil || errs[2] == nil || errs[1].Error() != "the batch's outcome" {
		t.Fatalf("errors %v: want the leader's nil and the batch's outcome for each follower", errs)
	}
	if n := b.Waiting("k"); n != 0 {
		t.Fatalf("%d waiting once all returned, want 0", n)
	}

	ran = nil
	other := message.NewMessage("other", nil)
	other.SetContext(WithKeys(context.Background(), []string{"k"}, MayElide))
	several := message.NewMessage("several", nil)
	several.SetContext(WithKeys(context.Background(), []string{"a", "b"}, MayBatch))
	for _, msg := range []*message.Message{other, several} {
		if _, err := h(msg); err != nil || b.Waiting("k") != 0 {
			t.Fatalf("%s: %v", msg.UUID, err)
		}
	}
	if !slices.Equal(ran, []string{"other", "several"}) {
		t.Fatalf("ran %v, want both through", ran)
	}
}

// run handles the messages of key k with h, each joining after the one before it, the first gated; it
// returns their errors once all returned.
func run(t *testing.T, b *Batcher, h message.HandlerFunc, gate chan struct{}, uuids ...string) []error {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(uuids))
	for i, uuid := range uuids {
		wg.Go(func() { _, errs[i] = h(batchMessage(uuid, "k")) })
		waitFor(t, b, "k", i+1)
	}
	close(gate)
	wg.Wait()
	return errs
}

// A batch put back (not handled: its write found the lock held, say) goes to the head of the queue again,
// in its order.
func TestABatchPutBackIsTakenAgainFirst(t *testing.T) {
	b := &Batcher{}
	gate := make(chan struct{})
	var got []string
	errs := run(t, b, b.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		<-gate
		b.PutBack("k", b.Take("k", 1)) // its own, not handled
		batch := b.Take("k", 2)
		for _, q := range batch {
			got = append(got, q.Msg.UUID)
		}
		b.Done("k", msg, batch, nil)
		return nil, nil
	}), gate, "leader", "f1")
	if errs[0] != nil || errs[1] != nil || !slices.Equal(got, []string{"leader", "f1"}) {
		t.Fatalf("the batch after a put-back %v, errors %v; want leader then f1, no errors", got, errs)
	}
}

// A follower that waits MaxWait without a batch taking it gives up with rlock.ErrNotObtained and ErrGaveUp;
// when the leader returns without taking a follower, the oldest follower leads and runs the handler itself.
func TestAFollowerGivesUpAfterMaxWaitOrLeadsNext(t *testing.T) {
	b := &Batcher{MaxWait: 50 * time.Millisecond}
	var mu sync.Mutex
	var ran []string
	gate := make(chan struct{})
	h := b.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		mu.Lock()
		ran = append(ran, msg.UUID)
		mu.Unlock()
		if msg.UUID == "leader" {
			<-gate
			time.Sleep(time.Second) // far past the follower's MaxWait of 50 ms
		}
		return nil, nil
	})
	errs := run(t, b, h, gate, "leader", "f1")
	if errs[0] != nil || !errors.Is(errs[1], rlock.ErrNotObtained) || !errors.Is(errs[1], ErrGaveUp) || len(ran) != 1 {
		t.Fatalf("ran %v, errors %v: want the leader alone, and f1 given up", ran, errs)
	}

	b.MaxWait, ran = 0, nil
	gate = make(chan struct{})
	errs = run(t, b, h, gate, "leader", "f2")
	if errs[0] != nil || errs[1] != nil || !slices.Equal(ran, []string{"leader", "f2"}) {
		t.Fatalf("ran %v, errors %v: want the leader, then f2 leading in turn", ran, errs)
	}
}

// A follower whose wait ends while a batch holds it waits on for that batch; put back unhandled, it fails
// with its own give-up, not the batch's outcome, and does not wait again.
func TestAFollowerThatGivesUpWhileTakenGetsItsGiveUpWhenPutBack(t *testing.T) {
	b := &Batcher{MaxWait: 50 * time.Millisecond}
	gate := make(chan struct{})
	errs := run(t, b, b.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		<-gate
		batch := b.Take("k", 2)
		time.Sleep(time.Second) // the follower's MaxWait ends while its message is taken
		b.PutBack("k", batch)
		return nil, nil
	}), gate, "leader", "f1")
	if errs[0] != nil || !errors.Is(errs[1], ErrGaveUp) || b.Waiting("k") != 0 {
		t.Fatalf("errors %v, %d waiting: want the follower's ErrGaveUp once its batch came back, none waiting", errs, b.Waiting("k"))
	}
}
