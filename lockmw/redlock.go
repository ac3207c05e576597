package lockmw

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// ErrQuorum: fewer than a majority of the Redlock masters answered as needed. The per-node causes are
// joined to it as *NodeError values.
var ErrQuorum = errors.New("lockmw: no quorum of Redis masters")

// NodeError is the failure of one Redlock master.
type NodeError struct {
	Addr string // the master's address
	Err  error
}

func (e *NodeError) Error() string { return "lockmw: node " + e.Addr + ": " + e.Err.Error() }
func (e *NodeError) Unwrap() error { return e.Err }

// Redlock is the lock on a majority of N independent Redis masters (the Redlock algorithm of redis.io), for
// when one Redis is not trusted to keep a lock through a failover. Every master holds the same reentrant
// hash in the Redisson layout, so the contract is Reentrant's: same leases, watchdog, reentrancy and
// fencing.
//
// An acquisition runs the acquire script on all masters at once, each bounded by Config.NodeTimeout, and
// succeeds with a majority and time left: validity = lease - elapsed - drift, drift = lease/100 + 2 ms.
// Otherwise it is undone on every master, including those that did not answer.
//
// Fencing: the token is the largest of the per-master counters in the majority, written back (raise only)
// to a majority before the lease is handed out. Any two majorities share a master, so the next acquisition
// reads a counter at least as high as every token handed out before and INCRs past it: tokens strictly
// increase even when the majority changes. The limit: a master that restarts without its data (no
// persistence, or fsync lost) forgets its counter, and if the masters that remember are then outside the
// majority a token can repeat. Run the masters with appendonly yes and appendfsync always (or everysec,
// accepting a one second window), or delay their restart by one lease as redis.io advises.
type Redlock struct {
	*engine
	nodes redlockNodes
}

var _ Locker = (*Redlock)(nil)

// NewRedlock returns a Redlock over clients, one per independent master (at least 3; an odd number, as an
// even one tolerates no more failures than one master less). It opens one pub/sub connection per master.
// The clients must honour context deadlines (redis.Options.ContextTimeoutEnabled) for NodeTimeout to work.
func NewRedlock(clients []redis.UniversalClient, cfg Config) (*Redlock, error) {
	if len(clients) < 3 {
		return nil, fmt.Errorf("lockmw: Redlock needs at least 3 independent Redis masters, got %d", len(clients))
	}
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(clients)%2 == 0 {
		cfg.Logger.Warn("lockmw: Redlock over an even number of masters tolerates no more failures than one less",
			"masters", len(clients))
	}
	nodes := redlockNodes{clients: clients, lease: cfg.Lease, tokenTTL: cfg.TokenTTL, timeout: cfg.NodeTimeout,
		quorum: len(clients)/2 + 1, logger: cfg.Logger}
	r := &Redlock{nodes: nodes}
	r.engine = newEngine("redlock", cfg, nodes)
	for _, c := range clients {
		r.notifiers = append(r.notifiers, newNotifier(c, r.queue.notify))
	}
	return r, nil
}

// Close closes the pub/sub connections; the clients stay open.
func (r *Redlock) Close() error {
	var errs []error
	for _, n := range r.notifiers {
		errs = append(errs, n.close())
	}
	return errors.Join(errs...)
}

type redlockNodes struct {
	clients  []redis.UniversalClient
	lease    time.Duration
	tokenTTL time.Duration
	timeout  time.Duration
	quorum   int
	logger   *slog.Logger
}

// each runs f on every master at once, each call bounded by the node timeout, and waits for all.
func (r redlockNodes) each(ctx context.Context, f func(ctx context.Context, i int, c redis.UniversalClient)) {
	r.eachWithin(ctx, r.timeout, f)
}

// eachWithin is each with another bound per call.
func (r redlockNodes) eachWithin(ctx context.Context, timeout time.Duration, f func(ctx context.Context, i int, c redis.UniversalClient)) {
	var wg sync.WaitGroup
	for i, c := range r.clients {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			f(ctx, i, c)
		})
	}
	wg.Wait()
}

func (r redlockNodes) nodeError(i int, err error) error {
	return &NodeError{Addr: addrOf(r.clients[i]), Err: err}
}

func addrOf(c redis.UniversalClient) string {
	if cl, ok := c.(*redis.Client); ok {
		return cl.Options().Addr
	}
	return fmt.Sprintf("%v", c)
}

func (r redlockNodes) acquire(ctx context.Context, n names, owner string, held bool) (attempt, error) {
	start := time.Now()
	replies := make([][]int64, len(r.clients))
	errs := make([]error, len(r.clients))
	r.each(ctx, func(ctx context.Context, i int, c redis.UniversalClient) {
		replies[i], errs[i] = acquireScript.Run(ctx, c, []string{n.lock, n.token}, r.lease.Milliseconds(), owner,
			r.tokenTTL.Milliseconds()).Int64Slice()
	})
	if ctx.Err() != nil {
		r.undo(ctx, n, owner, replies, errs, held)
		return attempt{}, ctx.Err()
	}

	var got int
	var token, count int64
	var failures []error
	pttl := time.Duration(-1)
	for i, res := range replies {
		if errs[i] != nil {
			failures = append(failures, r.nodeError(i, errs[i]))
			continue
		}
		a, err := parseAttempt(res)
		switch {
		case err != nil:
			failures = append(failures, r.nodeError(i, err))
		case a.ok:
			got++
			token, count = max(token, a.token), max(count, a.count)
		case pttl < 0 || a.pttl < pttl:
			pttl = a.pttl
		}
	}
	fail := func(err error) (attempt, error) {
		quiet := r.undo(ctx, n, owner, replies, errs, held)
		retry := pttl // another owner holds it: its unlock message wakes us, at the latest its lease ends
		if err != nil {
			retry = retryAfterFailure()
		}
		return attempt{pttl: retry, err: err, quiet: quiet}, nil
	}
	if got < r.quorum {
		if len(failures) > len(r.clients)-r.quorum { // no majority could answer: say why
			return fail(errors.Join(append([]error{ErrQuorum}, failures...)...))
		}
		return fail(nil)
	}
	if err := r.writeBackToken(ctx, n, token, replies); err != nil {
		return fail(err)
	}
	valid := start.Add(r.lease - drift(r.lease))
	if !time.Now().Before(valid) {
		return fail(fmt.Errorf("%w: the majority took longer than the lease", ErrQuorum))
	}
	return attempt{ok: true, token: token, count: count, valid: valid}, nil
}

// retryAfterFailure spreads the retries of processes that failed together.
func retryAfterFailure() time.Duration { return 20*time.Millisecond + rand.N(80*time.Millisecond) }

// writeBackToken makes sure a majority's fencing counters are at least token before it is used. Masters
// that answered token already need nothing; usually that is all of them.
func (r redlockNodes) writeBackToken(ctx context.Context, n names, token int64, replies [][]int64) error {
	have := 0
	for _, res := range replies {
		if len(res) == 3 && res[0] == 1 && res[1] == token {
			have++
		}
	}
	if have >= r.quorum {
		return nil
	}
	return r.raiseToken(ctx, n, token)
}

// raiseToken raises the fencing counter to at least token on every master; a majority must confirm.
func (r redlockNodes) raiseToken(ctx context.Context, n names, token int64) error {
	raised := make([]error, len(r.clients))
	r.each(ctx, func(ctx context.Context, i int, c redis.UniversalClient) {
		raised[i] = raiseTokenScript.Run(ctx, c, []string{n.token}, token, r.tokenTTL.Milliseconds()).Err()
	})
	var failures []error
	for i, err := range raised {
		if err != nil {
			failures = append(failures, r.nodeError(i, err))
		}
	}
	if len(r.clients)-len(failures) < r.quorum {
		return errors.Join(append([]error{fmt.Errorf("%w: fencing counter not raised", ErrQuorum)}, failures...)...)
	}
	return nil
}

// undo releases a failed attempt, even when the caller's context ended: on the masters that granted it,
// and on those that did not answer (their script may have run) unless the owner already held the lock,
// whose count there must not be touched. It reports whether it gave back a granted master, which
// publishes an unlock message.
func (r redlockNodes) undo(ctx context.Context, n names, owner string, replies [][]int64, errs []error, held bool) (gaveBack bool) {
	ctx = context.WithoutCancel(ctx)
	requestID := uuid.NewString()
	r.each(ctx, func(ctx context.Context, i int, c redis.UniversalClient) {
		granted := errs[i] == nil && len(replies[i]) == 3 && replies[i][0] == 1
		if granted || (errs[i] != nil && !held) {
			_ = releaseScript.Run(ctx, c, []string{n.lock, n.channel, n.latch(requestID)},
				owner, r.lease.Milliseconds(), latchTTL.Milliseconds()).Err()
		}
	})
	for i := range replies {
		if errs[i] == nil && len(replies[i]) == 3 && replies[i][0] == 1 {
			return true
		}
	}
	return false
}

func (r redlockNodes) release(ctx context.Context, n names, owner, requestID string) (int64, error) {
	lefts := make([]int64, len(r.clients))
	errs := make([]error, len(r.clients))
	release := func(ctx context.Context, i int, c redis.UniversalClient) {
		lefts[i], errs[i] = releaseScript.Run(ctx, c, []string{n.lock, n.channel, n.latch(requestID)},
			owner, r.lease.Milliseconds(), latchTTL.Milliseconds()).Int64()
	}
	r.each(ctx, release)
	var failures []error
	var failed []int
	released, notHeld, left := 0, 0, int64(0)
	for i, err := range errs {
		switch {
		case err != nil:
			failures = append(failures, r.nodeError(i, err))
			failed = append(failed, i)
		case lefts[i] >= 0:
			released++
			left = max(left, lefts[i])
		default:
			notHeld++
		}
	}
	switch {
	case released >= r.quorum:
		// The masters that did not answer keep their copy until the lease ends unless told again; the
		// latch makes a repeat of this request harmless where the first one landed.
		if len(failed) > 0 {
			go r.retryRelease(context.WithoutCancel(ctx), failed, release)
		}
		return left, nil
	case notHeld > len(r.clients)-r.quorum:
		return -1, nil // no majority can hold it for owner
	}
	// Unknown on too many masters: the caller retries the same request.
	return 0, errors.Join(append([]error{ErrQuorum}, failures...)...)
}

// retryRelease repeats a release on the masters that did not answer, with a longer timeout.
func (r redlockNodes) retryRelease(ctx context.Context, failed []int, release func(context.Context, int, redis.UniversalClient)) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, i := range failed {
		wg.Go(func() { release(ctx, i, r.clients[i]) })
	}
	wg.Wait()
}

func (r redlockNodes) renew(ctx context.Context, hs []*hold) []error {
	perNode := make([][]error, len(r.clients))
	// Renewals are not on anyone's critical path: a master may take a quarter of the watchdog's period to
	// answer (at least the node timeout), so a slow round does not lose the lease, and a dead majority is
	// still noticed within about one period.
	r.eachWithin(ctx, max(r.timeout, r.lease/12), func(ctx context.Context, i int, c redis.UniversalClient) {
		perNode[i] = renewAll(ctx, c, hs, r.lease)
	})
	out := make([]error, len(hs))
	for h := range hs {
		renewed := 0
		var failures []error
		for i := range r.clients {
			if err := perNode[i][h]; err == nil {
				renewed++
			} else {
				failures = append(failures, r.nodeError(i, err))
			}
		}
		// Fewer than a majority confirmed: the lease is lost at once. Waiting for its validity to run out
		// would keep a holder working that cannot show a majority.
		if renewed < r.quorum {
			out[h] = errors.Join(append([]error{ErrNotHeld, ErrQuorum}, failures...)...)
		}
	}
	return out
}
