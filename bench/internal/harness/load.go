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

	"github.com/stockflow/stockflow/lockmw/rlock"
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
	total := l.runLoops(ctx)
	var err error
	total.Counter, err = l.readCounter(ctx)
	return total, err
}

// runLoops runs every goroutine's loop until the duration has passed and merges what they saw.
func (l load) runLoops(ctx context.Context) loadResult {
	stop, cancel := context.WithTimeout(ctx, l.duration)
	defer cancel()
	var mu sync.Mutex
	var total loadResult
	start := time.Now()
	fanOut(len(l.lockers), l.perLocker, func(li, g int) {
		r := l.loop(stop, l.lockers[li], l.keyOf(li, g))
		mu.Lock()
		defer mu.Unlock()
		total.merge(r)
	})
	total.Elapsed = time.Since(start)
	total.Errors = total.Errors[:min(3, len(total.Errors))]
	return total
}

// keyOf is the key goroutine g of locker li takes: the one key of a contended load, else a key of its own.
func (l load) keyOf(li, g int) string {
	if l.key != "" {
		return l.key
	}
	return l.counterKey + ":" + strconv.Itoa(li) + ":" + strconv.Itoa(g)
}

func (l load) readCounter(ctx context.Context) (int64, error) {
	if l.counter == nil {
		return 0, nil
	}
	n, err := l.counter.Get(ctx, l.counterKey).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return n, err
}

func (r *loadResult) merge(o loadResult) {
	r.Sections += o.Sections
	r.Waits = append(r.Waits, o.Waits...)
	r.GaveUp += o.GaveUp
	r.ErrorCount += o.ErrorCount
	r.Errors = append(r.Errors, o.Errors...)
}

// loop takes the lock, runs the section, releases it and waits outside, until stop.
func (l load) loop(stop context.Context, lk locker, key string) loadResult {
	var r loadResult
	for stop.Err() == nil {
		unlock, wait, err := l.acquire(stop, lk, key)
		switch {
		case err == nil:
			r.Waits = append(r.Waits, wait)
			l.section(&r, unlock)
		case stopped(stop): // cut off by the end of the run: counts with the wait so far
			r.Waits = append(r.Waits, wait)
		case notObtained(err):
			r.Waits = append(r.Waits, wait)
			r.GaveUp++
		default:
			r.addError(fmt.Errorf("lock: %w", err))
			time.Sleep(10 * time.Millisecond) // no hot loop on a broken server
		}
	}
	return r
}

// stopped says the run's time is up. The deadline is read too: a client that puts the context's deadline
// on its socket (ContextTimeoutEnabled) can return "i/o timeout" before the context's own timer has fired.
func stopped(stop context.Context) bool {
	deadline, ok := stop.Deadline()
	return stop.Err() != nil || ok && !time.Now().Before(deadline)
}

// acquire takes key, bounded by maxWait, and says how long it waited.
func (l load) acquire(stop context.Context, lk locker, key string) (unlock func(context.Context) error, wait time.Duration, err error) {
	ctx, cancel := stop, context.CancelFunc(func() {})
	if l.maxWait > 0 {
		ctx, cancel = context.WithTimeout(stop, l.maxWait)
	}
	defer cancel()
	start := time.Now()
	unlock, err = lk.lock(ctx, key)
	return unlock, time.Since(start), err
}

// section runs the critical section, releases the lock and waits outside. Both run to the end, even past
// the stop.
func (l load) section(r *loadResult, unlock func(context.Context) error) {
	ctx := context.Background()
	if l.counter != nil {
		if err := increment(ctx, l.counter, l.counterKey); err != nil {
			r.addError(fmt.Errorf("counter: %w", err))
		}
	}
	if err := unlock(ctx); err != nil {
		r.addError(fmt.Errorf("unlock: %w", err))
	}
	r.Sections++
	time.Sleep(l.outside)
}

// fanOut runs work(group, i) on groups x perGroup goroutines and waits for all of them.
func fanOut(groups, perGroup int, work func(group, i int)) {
	var wg sync.WaitGroup
	for group := range groups {
		for i := range perGroup {
			wg.Go(func() { work(group, i) })
		}
	}
	wg.Wait()
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
	return errors.Is(err, rlock.ErrNotObtained) || errors.Is(err, redsync.ErrFailed) ||
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

// newLockerSets makes n lockers of every contender; close them with closeLockerSets.
func newLockerSets(contenders []contender, addrs []string, n int) ([][]locker, error) {
	sets := make([][]locker, 0, len(contenders))
	for _, c := range contenders {
		ls, err := newLockers(c, addrs, n)
		if err != nil {
			closeLockerSets(sets)
			return nil, err
		}
		sets = append(sets, ls)
	}
	return sets, nil
}

func closeLockerSets(sets [][]locker) {
	for _, s := range sets {
		closeLockers(s)
	}
}

func closeLockers(ls []locker) {
	for _, l := range ls {
		l.close()
	}
}
