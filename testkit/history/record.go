package history

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/stock"
)

// Recorder appends events to a history file. It is safe for concurrent use, and every method of a nil
// *Recorder does nothing, so a worker can hold a nil Recorder when recording is off.
//
// Each event is one write(2) of one line, unbuffered: a process killed with SIGKILL loses at most the
// event it was writing. Write errors do not disturb the caller; Close reports the first one.
type Recorder struct {
	f      *os.File
	worker string
	prefix string // random per Recorder: op ids stay unique when a restarted worker reuses its name
	seq    atomic.Uint64
	now    func() time.Time

	mu  sync.Mutex
	err error
}

// Open opens (creating it if needed) the history file at path for appending, recording as worker.
// Several processes may append to the same file.
func Open(path, worker string) (*Recorder, error) {
	if worker == "" {
		return nil, errors.New("history: empty worker name")
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	prefix := strconv.FormatUint(rand.Uint64(), 36)
	return &Recorder{f: f, worker: worker, prefix: prefix, now: time.Now}, nil
}

// Close closes the file and returns the first error met while recording, if any.
func (r *Recorder) Close() error {
	if r == nil {
		return nil
	}
	err := r.f.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	return errors.Join(r.err, err)
}

// header starts every line.
type header struct {
	Event  string    `json:"event"`
	Worker string    `json:"worker"`
	Time   time.Time `json:"time"`
}

type lockEvent struct {
	header
	Invoked *time.Time `json:"invoked,omitempty"` // acquired only
	Key     string     `json:"key"`
	Owner   string     `json:"owner"`
	Token   int64      `json:"token"`
}

type invokeEvent struct {
	header
	Op       string `json:"op"`
	Kind     Kind   `json:"kind"`
	SKU      string `json:"sku"`
	Order    string `json:"order"`
	Quantity int64  `json:"quantity"`
	Token    int64  `json:"token"`
}

type returnEvent struct {
	header
	Op string `json:"op"`
	Result
	// Token is the fencing token of the outcome (Outcome.Fence). The op's token is its invocation's, or when
	// that was 0, this one: the token the store took itself (inventory.ElideLock).
	Token int64 `json:"token,omitempty"`
}

type failEvent struct {
	header
	Op      string  `json:"op"`
	Failure Failure `json:"failure"`
	Error   string  `json:"error"`
}

// Acquired records that owner acquired the lock of key with token: call it once the acquisition has
// returned (with Redlock, once the stock's fence was raised to token), with the times Acquire was called
// and returned. The fencing check takes the token as known to the store from returned on.
func (r *Recorder) Acquired(key, owner string, token int64, invoked, returned time.Time) {
	if r == nil {
		return
	}
	invoked = invoked.UTC()
	r.write(lockEvent{header: r.header("acquired", returned), Invoked: &invoked, Key: key, Owner: owner, Token: token})
}

// Released records that owner released its hold of key with token at the given time.
func (r *Recorder) Released(key, owner string, token int64, at time.Time) {
	if r == nil {
		return
	}
	r.write(lockEvent{header: r.header("released", at), Key: key, Owner: owner, Token: token})
}

// Call is a stock operation under way: end it with Return or Fail. A nil *Call does nothing.
type Call struct {
	r  *Recorder
	id string
}

// Invoke records that a stock operation is about to start and returns the handle to record its end.
// Call it before the operation: an operation whose invocation was not recorded is invisible to the
// checks. quantity is the requested quantity (0 for a release), token the fencing token (0: unfenced).
func (r *Recorder) Invoke(kind Kind, sku, orderID string, quantity, token int64) *Call {
	if r == nil {
		return nil
	}
	c := &Call{r: r, id: r.prefix + "-" + strconv.FormatUint(r.seq.Add(1), 10)}
	r.write(invokeEvent{header: r.header("invoke", r.now()), Op: c.id, Kind: kind, SKU: sku, Order: orderID,
		Quantity: quantity, Token: token})
	return c
}

// Return records the outcome the store answered.
func (c *Call) Return(out inventory.Outcome) {
	if c == nil {
		return
	}
	res := Result{Status: out.Status, Reason: out.Reason, Quantity: out.Quantity, AvailableAfter: out.AvailableAfter,
		Replayed: out.Replayed}
	c.r.write(returnEvent{header: c.r.header("return", c.r.now()), Op: c.id, Result: res, Token: out.Fence})
}

// Fail records that the operation failed with err, classified by Classify.
func (c *Call) Fail(err error) {
	if c == nil {
		return
	}
	c.r.write(failEvent{header: c.r.header("fail", c.r.now()), Op: c.id, Failure: Classify(err), Error: err.Error()})
}

// Classify says whether a failed stock operation certainly had no effect (Refused) or may have been
// applied (Unknown). Refused are only the errors the scripts answer before their first write, and input
// errors caught before anything is sent: a stale fence, invalid input, nothing to release, an unknown SKU
// to release, a corrupt stock hash, a held lock an elided batch would have taken. Everything else is Unknown, even a refused connection: go-redis
// retries a command whose reply was lost, so the last attempt's error says nothing about the first.
func Classify(err error) Failure {
	for _, definite := range []error{inventory.ErrStaleFence, order.ErrInvalid, inventory.ErrNotReserved,
		stock.ErrUnknownSKU, inventory.ErrCorrupt, inventory.ErrLocked} {
		if errors.Is(err, definite) {
			return Refused
		}
	}
	return Unknown
}

func (r *Recorder) header(event string, at time.Time) header {
	return header{Event: event, Worker: r.worker, Time: at.UTC()}
}

// write appends one event as one line with one Write: O_APPEND makes each write land whole at the end
// of the file even with other processes appending.
func (r *Recorder) write(event any) {
	line, err := json.Marshal(event)
	if err == nil {
		_, err = r.f.Write(append(line, '\n'))
	}
	if err != nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.err == nil {
			r.err = fmt.Errorf("history: recording %s: %w", r.f.Name(), err)
		}
	}
}
