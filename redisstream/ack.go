package redisstream

import (
	"context"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/redis/go-redis/v9"
)

// acker sends the acks of a Subscriber: the acks given while one pipeline is on its way go together in the
// next, one XACK per stream, so that a busy subscriber costs a fraction of a round trip per ack.
type acker struct {
	rdb    redis.UniversalClient
	group  string
	logger watermill.LoggerAdapter

	mu      sync.Mutex
	pending map[string][]string // stream -> entry ids
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
}

func newAcker(rdb redis.UniversalClient, group string, logger watermill.LoggerAdapter) *acker {
	a := &acker{rdb: rdb, group: group, logger: logger, pending: map[string][]string{},
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go a.run()
	return a
}

func (a *acker) add(stream, id string) {
	a.mu.Lock()
	a.pending[stream] = append(a.pending[stream], id)
	a.mu.Unlock()
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

func (a *acker) run() {
	defer close(a.done)
	for {
		select {
		case <-a.kick:
			a.flush()
		case <-a.stop:
			a.flush()
			return
		}
	}
}

// close sends the acks given so far and stops.
func (a *acker) close() {
	close(a.stop)
	<-a.done
}

// flush sends the pending acks, trying 3 times; acks it cannot send leave their entries pending, to be
// claimed and handed out again (at least once).
func (a *acker) flush() {
	a.mu.Lock()
	batch := a.pending
	a.pending = make(map[string][]string, len(batch))
	a.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	var err error
	for attempt := range 3 {
		if attempt > 0 {
			time.Sleep(100 * time.Millisecond << attempt)
		}
		if err = a.send(batch); err == nil {
			return
		}
	}
	a.logger.Error("Ack failed: the entries stay pending until claimed", err, watermill.LogFields{"streams": len(batch)})
}

func (a *acker) send(batch map[string][]string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if len(batch) == 1 {
		for stream, ids := range batch {
			return a.rdb.XAck(ctx, stream, a.group, ids...).Err()
		}
	}
	pipe := a.rdb.Pipeline()
	for stream, ids := range batch {
		pipe.XAck(ctx, stream, a.group, ids...)
	}
	_, err := pipe.Exec(ctx)
	return err
}
