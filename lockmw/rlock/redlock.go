package rlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrQuorum: fewer than a majority of the Redlock masters answered as needed. The per-node causes come
// with it as *NodeError values (errors.As finds them).
var ErrQuorum = errors.New("rlock: no quorum of Redis masters")

// NodeError is the failure of one Redlock master.
type NodeError struct {
	Addr string // the master's address
	Err  error
}

// Error says which master failed and how: "rlock: node 10.0.0.1:6379: i/o timeout".
func (e *NodeError) Error() string {
	return prefix + "node " + e.Addr + ": " + strings.TrimPrefix(e.Err.Error(), prefix)
}

// Unwrap returns the master's error, for errors.Is (context.DeadlineExceeded, ErrMasterSkipped).
func (e *NodeError) Unwrap() error { return e.Err }

// Redlock is the lock on a majority of N independent Redis masters (the Redlock algorithm of redis.io), for
// when one Redis is not trusted to keep a lock through a failover. Every master holds the same reentrant
// hash in the Redisson layout, so the contract is Reentrant's: same leases, watchdog, reentrancy and
// fencing.
//
// An acquisition runs the acquire script on all masters at once, each bounded by Config.NodeTimeout, and
// succeeds with a majority and time left: validity = lease - elapsed - drift, drift = lease/100 + 2 ms.
// Otherwise it is undone on every master that may hold it, including those that did not answer. An
// acquisition and a release return as soon as a majority answered them; the calls still out finish in the
// background, and a process's next call on the lock reaches each master after the one before it there
// (waiting at most the node timeout for it, else failing unsent). A master that failed to answer is
// skipped by acquisitions and releases for MasterCooldown while the others make a majority (breakers), so a
// dead minority costs the node timeout about once a second rather than on every call.
//
// Fencing: the token is the largest of the per-master counters in the majority, written back (raise only)
// to a majority before the lease is handed out. Any two majorities share a master, so the next acquisition
// reads a counter at least as high as every token handed out before and INCRs past it: tokens strictly
// increase even when the majority changes. The limit: a master that restarts without its data (no
// persistence, or fsync lost) forgets its counter, and if the masters that remember are then outside the
// majority a token can repeat. Run the masters with appendonly yes and appendfsync always (or everysec,
// accepting a one second window), or delay their restart by one lease as redis.io advises.
type Redlock struct {
	e     *engine
	nodes redlockNodes
}

var _ Locker = (*Redlock)(nil)

// NewRedlock returns a Redlock over clients, one per independent master (at least 3; an odd number, as an
// even one tolerates no more failures than one master less). It opens one pub/sub connection per master.
// The clients must honour context deadlines (redis.Options.ContextTimeoutEnabled) for NodeTimeout to work.
// NewRedlock adds a hook to each client that skips a master for MasterCooldown after it failed to answer
// (see ErrMasterSkipped): give it clients of its own.
func NewRedlock(clients []redis.UniversalClient, cfg Config) (*Redlock, error) {
	if len(clients) < 3 {
		return nil, fmt.Errorf("rlock: Redlock needs at least 3 independent Redis masters, got %d", len(clients))
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	if len(clients)%2 == 0 {
		cfg.Logger.Warn("rlock: Redlock over an even number of masters tolerates no more failures than one less",
			"masters", len(clients))
	}
	sharded := cfg.ShardedPubSub == ShardedOn
	nodes := redlockNodes{scripts: newScripts(cfg, sharded), clients: clients, timeout: cfg.NodeTimeout,
		quorum: len(clients)/2 + 1, lanes: new(sync.Map), workers: newWorkers(workerIdle),
		pending: new(sync.WaitGroup)}
	b := newBreakers(len(clients), nodes.quorum)
	for i, c := range clients {
		c.AddHook(b.hook(i))
	}
	e, err := newEngine("redlock", cfg, nodes)
	if err != nil {
		return nil, err
	}
	for _, c := range clients {
		e.notifiers = append(e.notifiers, startNotifier(c, sharded, e.queue.notify))
	}
	return &Redlock{e: e, nodes: nodes}, nil
}

// Acquire takes the lock of key on a majority of the masters, waiting until it is free, ctx is done or
// Config.MaxWait passes. The owner is OwnerFrom(ctx), which a lease's Context carries: an owner that
// already holds key re-enters at once, keeping its token. Without an owner each call is a new owner.
// A failure wraps ErrNotObtained (with ctx.Err(), or ErrQuorum and the masters' *NodeError when too few
// answered), ErrInvalidKey, or the error of a Redis call.
func (r *Redlock) Acquire(ctx context.Context, key string) (Lease, error) {
	return r.e.acquire(ctx, key, true)
}

// TryAcquire is Acquire without waiting: one round on the masters, ErrNotObtained when another owner
// holds key (or too few masters answered: then with ErrQuorum).
func (r *Redlock) TryAcquire(ctx context.Context, key string) (Lease, error) {
	return r.e.acquire(ctx, key, false)
}

// RaiseToken raises the fencing counter of key to at least token (never lowers it) on a majority of the
// masters, so the next fresh acquisition gets a larger token: see Reentrant.RaiseToken.
func (r *Redlock) RaiseToken(ctx context.Context, key string, token int64) error {
	return r.e.raiseToken(ctx, key, token)
}

// Close waits for the calls to the masters that acquisitions and releases left running when they returned
// (at most the node timeout, or a second for a release's retry), then closes the pub/sub connections; the
// clients stay open. Call it after the last call on the lock returned.
func (r *Redlock) Close() error {
	r.nodes.pending.Wait() // the calls an acquisition or release left out: the caller may close the clients next
	var errs []error
	for _, n := range r.e.notifiers {
		errs = append(errs, n.close())
	}
	return join(errs...)
}

// redlockNodes runs the lock scripts on every master and counts the majority.
type redlockNodes struct {
	scripts
	clients []redis.UniversalClient
	timeout time.Duration // per call
	quorum  int
	lanes   *sync.Map       // lock -> *lane: the last call of this process on each lock, until every master answered it
	workers *workers        // run the calls to the masters
	pending *sync.WaitGroup // the calls still out after their acquisition or release returned
}

// each runs f on every master at once, each call bounded by the node timeout, and waits for all.
func (r redlockNodes) each(ctx context.Context, f func(ctx context.Context, i int, c redis.UniversalClient)) {
	r.eachWithin(ctx, r.timeout, f)
}

// eachWithin is each with another bound per call.
func (r redlockNodes) eachWithin(ctx context.Context, timeout time.Duration, f func(ctx context.Context, i int, c redis.UniversalClient)) {
	var wg sync.WaitGroup
	wg.Add(len(r.clients))
	r.start(ctx, timeout, func(ctx context.Context, i int, c redis.UniversalClient) {
		defer wg.Done()
		f(ctx, i, c)
	})
	wg.Wait()
}

// errNoAnswer is the error of a master whose answer a call did not wait for: its script may run.
var errNoAnswer = errors.New("rlock: no answer yet")

// answer is one master's answer to a call.
type answer[T any] struct {
	i   int
	val T
	err error
}

// lane is one call of this process on a lock, per master: done[i] is closed once master i answered.
type lane struct{ done []chan struct{} }

func newLane(masters int) *lane {
	l := &lane{done: make([]chan struct{}, masters)}
	for i := range l.done {
		l.done[i] = make(chan struct{})
	}
	return l
}

// wait waits until master i answered the call of l (none when l is nil), for at most limit.
func (l *lane) wait(i int, limit time.Duration) error {
	if l == nil {
		return nil
	}
	select {
	case <-l.done[i]: // the usual case: no timer (a 5-master cycle made ten)
		return nil
	default:
	}
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-l.done[i]:
		return nil
	case <-t.C:
		return errNodeTimeout
	}
}

// settle waits until every master answered the call of l, and the calls before it.
func (l *lane) settle() {
	for _, done := range l.done {
		<-done
	}
}

// fanOut is a call to every master and what becomes of its answers.
type fanOut[T any] struct {
	call func(ctx context.Context, i int, c redis.UniversalClient) (T, error)
	take func(answer[T]) bool               // takes an answer; true once the outcome is known
	rest func(mine *lane, late []answer[T]) // gets the answers that came after gather returned, once all came
}

// gather runs f.call on every master at once, each within the node timeout whatever becomes of ctx, and
// hands the answers to f.take as they come, until it says the outcome is known or every master answered:
// waiting for the slowest master would add its time to every acquisition and release. The calls still out
// finish in the background, and the channel returned is closed once every master answered.
//
// The calls of this process on one lock keep their order on each master: a call waits for the previous
// one on its master (while that is out, the next call only costs that master's answer, not the majority's).
// A release that overtook a grant would leave that master holding the lock for a whole lease; a grant
// that overtook the release before it would be refused there, held on fewer masters. A call waits at most
// the node timeout, then fails unsent; its lane is done only once the call before it is, so the calls after
// it keep waiting for that one. The node timeout of a call that is sent starts when it is sent.
func gather[T any](r redlockNodes, ctx context.Context, lock string, f fanOut[T]) <-chan struct{} {
	mine := newLane(len(r.clients))
	prev, _ := r.lanes.Swap(lock, mine)
	before, _ := prev.(*lane)
	answers := make(chan answer[T], len(r.clients))
	base := context.WithoutCancel(mayskip(ctx))
	for i, c := range r.clients {
		r.workers.run(func() {
			a := answer[T]{i: i}
			if a.err = before.wait(i, r.timeout); a.err == nil {
				ctx, cancel := context.WithTimeoutCause(base, r.timeout, errNodeTimeout)
				a.val, a.err = f.call(ctx, i, c)
				cancel()
				close(mine.done[i])
			} else {
				r.pending.Go(func() { <-before.done[i]; close(mine.done[i]) })
			}
			answers <- a
		})
	}
	left := takeUntil(answers, len(r.clients), f.take)
	settled := make(chan struct{})
	r.pending.Go(func() {
		f.rest(mine, collect(answers, left))
		close(settled)
		mine.settle() // an unsent call's lane is done only once the call before it is
		r.lanes.CompareAndDelete(lock, mine)
	})
	return settled
}

// takeUntil hands the n answers to come to take until it returns true, and returns how many are left.
func takeUntil[T any](answers <-chan answer[T], n int, take func(answer[T]) bool) (left int) {
	for left = n; left > 0; {
		left--
		if take(<-answers) {
			break
		}
	}
	return left
}

// collect receives n answers.
func collect[T any](answers <-chan answer[T], n int) []answer[T] {
	got := make([]answer[T], 0, n)
	for range n {
		got = append(got, <-answers)
	}
	return got
}

// start runs f on every master at once, each call bounded by timeout, and returns without waiting for them.
func (r redlockNodes) start(ctx context.Context, timeout time.Duration, f func(ctx context.Context, i int, c redis.UniversalClient)) {
	for i, c := range r.clients {
		r.workers.run(func() {
			ctx, cancel := context.WithTimeoutCause(ctx, timeout, errNodeTimeout)
			defer cancel()
			f(ctx, i, c)
		})
	}
}

func (r redlockNodes) nodeError(i int, err error) error {
	return &NodeError{Addr: addrOf(r.clients[i]), Err: err}
}

// nodeErrors returns the failures in errs, one per master, as *NodeError.
func (r redlockNodes) nodeErrors(errs []error) []error {
	var failures []error
	for i, err := range errs {
		if err != nil {
			failures = append(failures, r.nodeError(i, err))
		}
	}
	return failures
}

func addrOf(c redis.UniversalClient) string {
	if cl, ok := c.(*redis.Client); ok {
		return cl.Options().Addr
	}
	return fmt.Sprintf("%v", c)
}

// joinFailures joins causes and the failures of the masters.
func joinFailures(failures []error, causes ...error) error {
	return join(append(causes, joinNodes(failures))...)
}

// raiseToken raises the fencing counter to at least token on every master; a majority must confirm.
func (r redlockNodes) raiseToken(ctx context.Context, n names, token int64) error {
	raised := make([]error, len(r.clients))
	r.each(mayskip(ctx), func(ctx context.Context, i int, c redis.UniversalClient) {
		raised[i] = r.runRaiseToken(ctx, c, n, token)
	})
	if failures := r.nodeErrors(raised); len(r.clients)-len(failures) < r.quorum {
		return joinFailures(failures, fmt.Errorf("%w: fencing counter not raised", ErrQuorum))
	}
	return nil
}

func (r redlockNodes) servers() int { return len(r.clients) }

func (r redlockNodes) release(ctx context.Context, req *unlock) (releaseReply, error) {
	replies := make([]releaseReply, len(r.clients))
	errs := slices.Repeat([]error{errNoAnswer}, len(r.clients))
	var released, notHeld int
	var out releaseReply
	keys := releaseKeys(req)
	gather(r, ctx, req.n.lock, fanOut[releaseReply]{
		call: func(ctx context.Context, i int, c redis.UniversalClient) (releaseReply, error) {
			return r.runRelease(ctx, direct{c}, req, keys, i)
		},
		take: func(a answer[releaseReply]) bool {
			replies[a.i], errs[a.i] = a.val, a.err
			released, notHeld, out = countReleases(replies, errs)
			return released >= r.quorum || notHeld > len(r.clients)-r.quorum
		},
		rest: func(mine *lane, late []answer[releaseReply]) {
			// The masters that failed keep their copy until the lease ends unless told again; the request's
			// latch and sends make a repeat of it harmless where the first one landed.
			failed := slices.Clone(errs)
			for _, a := range late {
				failed[a.i] = a.err
			}
			if released >= r.quorum { // rest runs in the background already
				r.retry(context.WithoutCancel(ctx), mine, failed, func(ctx context.Context, i int, c redis.UniversalClient) {
					_, _ = r.runRelease(ctx, direct{c}, req, keys, i)
				})
			}
		},
	})
	switch {
	case released >= r.quorum:
		return out, nil
	case notHeld > len(r.clients)-r.quorum:
		return releaseReply{left: -1}, nil // no majority can hold it for owner
	}
	// Unknown on too many masters: the caller retries the same request.
	return releaseReply{}, joinFailures(r.nodeErrors(errs), ErrQuorum)
}

// countReleases counts the masters that released a hold, with the most holds left and listeners reached
// among them, and those where the owner held none.
func countReleases(replies []releaseReply, errs []error) (released, notHeld int, out releaseReply) {
	for i, rep := range replies {
		switch {
		case errs[i] != nil: // unknown: counts for neither
		case rep.left >= 0:
			released++
			out.left, out.receivers = max(out.left, rep.left), max(out.receivers, rep.receivers)
		default:
			notHeld++
		}
	}
	return released, notHeld, out
}

// retry runs call again on the masters where it failed (errs), each within a second once the calls before
// it there (its lane, after) were answered, which it waits a second for: a release that was not sent,
// because the grant before it was late, must not overtake that grant now.
func (r redlockNodes) retry(ctx context.Context, after *lane, errs []error, call func(context.Context, int, redis.UniversalClient)) {
	var wg sync.WaitGroup
	for i, err := range errs {
		if err != nil {
			wg.Go(func() {
				if after.wait(i, time.Second) == nil {
					ctx, cancel := context.WithTimeout(ctx, time.Second)
					defer cancel()
					call(ctx, i, r.clients[i])
				}
			})
		}
	}
	wg.Wait()
}

func (r redlockNodes) renew(ctx context.Context, hs []*hold, lease time.Duration) []error {
	perNode := make([][]error, len(r.clients))
	// Renewals are not on anyone's critical path: a master may take a quarter of the watchdog's period to
	// answer (at least the node timeout), so a slow round does not lose the lease, and a dead majority is
	// still noticed within about one period.
	r.eachWithin(ctx, max(r.timeout, r.lease/12), func(ctx context.Context, i int, c redis.UniversalClient) {
		perNode[i] = renewAll(ctx, c, hs, lease)
	})
	out := make([]error, len(hs))
	for h := range hs {
		out[h] = r.renewedByMajority(perNode, h)
	}
	return out
}

// renewedByMajority reports whether a majority renewed hold h. With fewer the lease is lost at once:
// waiting for its validity to run out would keep a holder working that cannot show a majority.
func (r redlockNodes) renewedByMajority(perNode [][]error, h int) error {
	errs := make([]error, len(perNode))
	for i := range perNode {
		errs[i] = perNode[i][h]
	}
	if failures := r.nodeErrors(errs); len(r.clients)-len(failures) < r.quorum {
		return joinFailures(failures, ErrNotHeld, ErrQuorum)
	}
	return nil
}

// ttl returns how long a majority of the masters keep owner's lock: the majority-th longest remaining
// lease among those that hold it. ErrNotHeld when no majority can hold it for owner.
func (r redlockNodes) ttl(ctx context.Context, n names, owner string) (time.Duration, error) {
	ttls := make([]time.Duration, len(r.clients))
	errs := make([]error, len(r.clients))
	r.each(mayskip(ctx), func(ctx context.Context, i int, c redis.UniversalClient) {
		ttls[i], errs[i] = runTTL(ctx, c, n, owner)
	})
	var held []time.Duration
	notHeld := 0
	for i, ttl := range ttls {
		switch {
		case errs[i] != nil:
		case ttl < 0:
			notHeld++
		default:
			held = append(held, ttl)
		}
	}
	switch {
	case len(held) >= r.quorum:
		slices.Sort(held)
		return held[len(held)-r.quorum], nil
	case notHeld > len(r.clients)-r.quorum:
		return 0, ErrNotHeld
	}
	return 0, joinFailures(r.nodeErrors(errs), ErrQuorum)
}
