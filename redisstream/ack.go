package redisstream

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
)

// ErrLeftPending is the error of a handler that left its entry pending in Redis on purpose: handed back to
// be claimed after a pause (a failed attempt), or claimed by another consumer meanwhile. The router nacks
// the message; the subscriber does not pause before its next read, as it does after another failure.
var ErrLeftPending = errors.New("redisstream: the entry was left pending")

// ReleaseMiddleware is the Router middleware that calls Release for every message as its handler returns,
// with the handler's error (ErrHandlerPanicked should it panic): with ReleasedByHandler, add it to the
// handler first, so that it wraps the others (message.Handler.AddMiddleware), and add no router-level
// middleware that retries the handler or changes its error (Watermill's Retry, PoisonQueue): those run
// outside it, and a message must be released once, with the error the Router acks or nacks it by.
func (s *Subscriber) ReleaseMiddleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) (msgs []*message.Message, err error) {
		r := s.readerOf(msg)
		if r == nil {
			return h(msg)
		}
		err = ErrHandlerPanicked
		defer func() { r.Release(msg, err) }() // a panic too: the Router nacks the message
		return h(msg)
	}
}

// ErrHandlerPanicked is what ReleaseMiddleware releases a message with whose handler panicked.
var ErrHandlerPanicked = errors.New("redisstream: the handler panicked")

// Release frees msg's place in flight, err being what its handler returns: with ReleasedByHandler, the
// handler calls it for every message, just before it returns (ReleaseMiddleware does; a deferred call
// covers a panic). Its entry is acked in Redis once the Router acks the message (err nil). Without
// ReleasedByHandler it does nothing.
func (s *Subscriber) Release(msg *message.Message, err error) {
	if r := s.readerOf(msg); r != nil {
		r.Release(msg, err)
	}
}

// readerOf is the reader that sent msg, with ReleasedByHandler (the stream's one subscription); nil
// without it, or when msg's stream has no subscription.
func (s *Subscriber) readerOf(msg *message.Message) *reader {
	if !s.config.ReleasedByHandler {
		return nil
	}
	if r := s.only.Load(); r != nil {
		return r
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if gs := s.first[Stream(msg)]; gs != nil {
		return gs.reader
	}
	return nil
}

// Release frees the place in flight of msg, a message the subscriber sent, with Released set, err being what
// its handler returned: at once, its entry acked in Redis once the router acks it (err nil); at once when
// the handler left the entry pending on purpose (ErrLeftPending); else after NackPause (the router nacks
// it).
func (s *reader) Release(msg *message.Message, err error) {
	switch {
	case err == nil:
		s.acks.add(msg)
	case !errors.Is(err, ErrLeftPending):
		time.AfterFunc(s.cfg.NackPause, s.free)
		return
	}
	s.free()
}

// acks sends the acks of a subscriber's messages to Redis, as the router gives them: the messages acked
// while a pipeline is on its way go together in the next, one XACK per partition, so that a busy consumer
// costs a fraction of a round trip per ack. A message released (reader.Release) is acked once the
// router's verdict comes, a moment later: Ack, or Nack (no XACK). One goroutine runs while acks are
// queued.
type acks struct {
	rdb    redis.UniversalClient
	group  string
	parts  []partition
	logger *slog.Logger

	mu      sync.Mutex
	idle    *sync.Cond
	queued  []*message.Message
	running bool
	// added counts the messages ever queued, done those whose acks were sent (or given up), so that flush
	// waits for the acks queued before it, not for a queue that acks given since keep full.
	added, done uint64
}

func newAcks(rdb redis.UniversalClient, cfg readerConfig) *acks {
	a := &acks{rdb: rdb, group: cfg.Group, parts: cfg.Partitions, logger: cfg.Logger}
	a.idle = sync.NewCond(&a.mu)
	return a
}

// add queues msg's ack, to be sent once the router acks it.
func (a *acks) add(msg *message.Message) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.queued = append(a.queued, msg)
	a.added++
	if !a.running {
		a.running = true
		go a.run()
	}
}

// run sends the queued acks, pipeline after pipeline, until none is queued.
func (a *acks) run() {
	for {
		a.mu.Lock()
		batch := a.queued
		a.queued = nil
		if len(batch) == 0 {
			a.running = false
			a.mu.Unlock()
			return
		}
		a.mu.Unlock()
		a.send(a.byPartition(batch))
		a.mu.Lock()
		a.done += uint64(len(batch))
		a.idle.Broadcast()
		a.mu.Unlock()
	}
}

// flush waits until every ack queued so far is sent (or given up), however many are queued since.
func (a *acks) flush() { a.waitFor(a.queuedSoFar()) }

// queuedSoFar is how many acks were queued so far, for waitFor.
func (a *acks) queuedSoFar() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.added
}

// waitFor waits until the first n acks queued are sent (or given up).
func (a *acks) waitFor(n uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for a.done < n {
		a.idle.Wait()
	}
}

// byPartition waits for the router's verdict on each message of batch and returns the entry ids of those it
// acked, by partition; not those of messages whose answer met ErrNotPending (another consumer's now).
func (a *acks) byPartition(batch []*message.Message) map[int][]string {
	ids := make(map[int][]string, 1)
	for _, msg := range batch {
		select {
		case <-msg.Acked():
			if notPending(msg) {
				continue
			}
			p := EntryPartition(msg)
			ids[p] = append(ids[p], EntryID(msg))
		case <-msg.Nacked():
		}
	}
	return ids
}

// send sends the acks of ids, trying 3 times: an ack it cannot send leaves its entry pending, to be claimed
// and handed out again, its outcome replayed (at least once).
func (a *acks) send(ids map[int][]string) {
	if len(ids) == 0 {
		return
	}
	var err error
	for attempt := range 3 {
		if attempt > 0 {
			time.Sleep(100 * time.Millisecond << attempt)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		pipe := a.rdb.Pipeline()
		for p, list := range ids {
			pipe.XAck(ctx, a.parts[p].Orders, a.group, list...)
		}
		_, err = pipe.Exec(ctx)
		cancel()
		if err == nil {
			return
		}
	}
	a.logger.Warn("acking entries failed: they stay pending until claimed, and their outcomes are replayed then", "partitions", len(ids), "err", err)
}
