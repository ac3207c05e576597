package harness

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/lockmw"
)

// load is one timed run: every locker (a simulated process) runs perLocker goroutines that take the lock,
// do the section, release it and wait outside, until duration has passed.
type load struct {
	lockers   []locker
	perLocker int
	// key is the one key all goroutines take; "" gives each goroutine a key of its own (uncontended).
	key string
	// counter, when set, is where each section increments counterKey with a non-atomic GET and SET:
	// exact only if the lock excludes.
	counter    *redis.Client
	counterKey string
	outside    time.Duration
	duration   time.Duration
	// maxWait bounds each acquisition (as the worker's LOCK_WAIT); 0: only the implementation's own bound.
	maxWait time.Duration
}

// loadResult is what a load observed.
type loadResult struct {
	Sections int
	Elapsed  time.Duration
	// Waits of every acquisition: those that got the lock, and those that did not (gave up, or still
	// waiting at the end: counted with the wait so far), so an unfair lock's starved waiters show.
	Waits      []time.Duration
	GaveUp     int      // acquisitions that ended without the lock: waited out, tries used up
	ErrorCount int      // anything else: Redis errors, failed unlocks
	Errors     []string // the first few
	Counter    int64    // the counter after the run
}

func (r *loadResult) addError(err error) {
	r.ErrorCount++
	if len(r.Errors) < 3 {
		r.Errors = append(r.Errors, err.Error())
	}
}

// run runs the load; the counter is reset first. Acquisitions still waiting when the time is up are
// cancelled. A cancelled acquisition may leave its lock behind (a peer's SET NX whose reply was cut off),
// so every run must use keys of its own.
func (l load) run(ctx context.Context) (loadResult, error) {
	if l.counter != nil {
		if err := l.counter.Del(ctx, l.counterKey).Err(); err != nil {
			return loadResult{}, err
		}
	}
	stop, cancel := context.WithTimeout(ctx, l.duration)
	defer cancel()
	var (
		mu    sync.Mutex
		total loadResult
		wg    sync.WaitGroup
	)
	start := time.Now()
	for li, lk := range l.lockers {
		for g := range l.perLocker {
			key := l.key
			if key == "" {
				key = l.counterKey + ":" + strconv.Itoa(li) + ":" + strconv.Itoa(g)
			}
			wg.Go(func() {
				r := l.loop(stop, lk, key)
				mu.Lock()
				defer mu.Unlock()
				total.Sections += r.Sections
				total.Waits = append(total.Waits, r.Waits...)
				total.GaveUp += r.GaveUp
				total.ErrorCount += r.ErrorCount
				total.Errors = append(total.Errors, r.Errors...)
			})
		}
	}
	wg.Wait()
	total.Elapsed = time.Since(start)
	if len(total.Errors) > 3 {
		total.Errors = total.Errors[:3]
	}
	if l.counter != nil {
		n, err := l.counter.Get(ctx, l.counterKey).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return total, err
		}
		total.Counter = n
	}
	return total, nil
}

func (l load) loop(stop context.Context, lk locker, key string) loadResult {
	var r loadResult
	bg := context.Background() // sections and releases run to the end, even past the stop
	for stop.Err() == nil {
		actx, cancel := stop, context.CancelFunc(func() {})
		if l.maxWait > 0 {
			actx, cancel = context.WithTimeout(stop, l.maxWait)
		}
		t0 := time.Now()
		unlock, err := lk.lock(actx, key)
		wait := time.Since(t0)
		cancel()
		if err != nil {
			switch {
			case stop.Err() != nil:
				r.Waits = append(r.Waits, wait)
				return r
			case notObtained(err):
				r.Waits = append(r.Waits, wait)
				r.GaveUp++
			default:
				r.addError(fmt.Errorf("lock: %w", err))
				time.Sleep(10 * time.Millisecond) // no hot loop on a broken server
			}
			continue
		}
		r.Waits = append(r.Waits, wait)
		if l.counter != nil {
			if err := increment(bg, l.counter, l.counterKey); err != nil {
				r.addError(fmt.Errorf("counter: %w", err))
			}
		}
		if err := unlock(bg); err != nil {
			r.addError(fmt.Errorf("unlock: %w", err))
		}
		r.Sections++
		if l.outside > 0 {
			time.Sleep(l.outside)
		}
	}
	return r
}

// increment is the critical section: a read-modify-write that loses updates unless the lock excludes.
func increment(ctx context.Context, rdb *redis.Client, key string) error {
	n, err := rdb.Get(ctx, key).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	return rdb.Set(ctx, key, n+1, 0).Err()
}

// notObtained: the implementation gave up waiting (its own bound or the harness's), which is not an error.
func notObtained(err error) bool {
	var taken *redsync.ErrTaken
	var nodeTaken *redsync.ErrNodeTaken
	return errors.Is(err, lockmw.ErrNotObtained) || errors.Is(err, redsync.ErrFailed) ||
		errors.As(err, &taken) || errors.As(err, &nodeTaken) || errors.Is(err, redislock.ErrNotObtained) ||
		errors.Is(err, context.DeadlineExceeded)
}

// newLockers makes n lockers of c over addrs; close them with closeLockers.
func newLockers(c contender, addrs []string, n int) ([]locker, error) {
	var out []locker
	for range n {
		l, err := c.new(addrs)
		if err != nil {
			closeLockers(out)
			return nil, fmt.Errorf("%s: %w", c.name, err)
		}
		out = append(out, l)
	}
	return out, nil
}

func closeLockers(ls []locker) {
	for _, l := range ls {
		l.close()
	}
}
