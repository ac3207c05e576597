package e2e

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// A worker killed after a round of its stock scripts ran and before the round's outcome transaction (the
// reservations are in Redis; their outcome events and acks are not) loses nothing and reserves nothing
// twice: a second worker claims the entries, the scripts replay the recorded outcomes, and the stock adds
// up to the reserved outcomes.
func TestAWorkerKilledBetweenThePipelineAndTheAck(t *testing.T) {
	s := redistest.Start(t)
	crashy := startWorker(t, s, "crashy", "FAULT_EXIT_AFTER_ROUND=3")
	survivor := make(chan struct{})
	go func() {
		defer close(survivor)
		if _, exited := crashy.exited(60 * time.Second); exited {
			startWorker(t, s, "survivor")
		}
	}()
	sum := produce(t, s, "--orders", "600", "--skus", "20", "--seed-stock", "20", "--rate", "600")
	<-survivor
	if err, exited := crashy.exited(time.Second); !exited || err == nil {
		t.Fatalf("the crashing worker: exited %v (%v), want it killed by its fault", exited, err)
	}
	assertConsistent(t, sum) // reserved stock equals the reserved outcomes: nothing reserved twice
	if n := replayedOutcomes(t, s); n == 0 {
		t.Error("no outcome was replayed: the crash did not fall between a round's scripts and its outcomes")
	}
}

// replayedOutcomes counts the outcome events of orders decided by an earlier delivery.
func replayedOutcomes(t *testing.T, s *redistest.Server) int {
	t.Helper()
	n := 0
	for _, x := range s.Client().XRange(context.Background(), "order-results", "-", "+").Val() {
		var r order.Result
		if err := json.Unmarshal([]byte(x.Values["payload"].(string)), &r); err == nil && r.Replayed {
			n++
		}
	}
	return n
}
