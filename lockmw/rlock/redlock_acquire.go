package rlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// acquire runs one round of the acquire script on every master and tallies it: with a majority and time
// left the lock is kept, otherwise the round is undone on every master that may hold it.
func (r redlockNodes) acquire(ctx context.Context, n names, owner string, held bool) (attempt, error) {
	start := time.Now()
	rd := r.acquireRound(ctx, n, owner, held)
	if ctx.Err() != nil {
		r.undo(ctx, rd)
		return attempt{}, ctx.Err()
	}
	t := r.tally(rd)
	if t.got < r.quorum {
		return r.fail(ctx, rd, t.pttl, r.noQuorum(t.failures)), nil
	}
	valid, err := r.validity(ctx, rd, t.token, start)
	if err != nil {
		return r.fail(ctx, rd, t.pttl, err), nil
	}
	return attempt{ok: true, token: t.token, count: t.count, valid: valid}, nil
}

// round is one run of the acquire script on every master.
type round struct {
	n       names
	owner   string
	held    bool // the owner held the lock before the round
	replies [][]int64
	errs    []error       // errNoAnswer for a master that had not answered when the round returned
	settled chan struct{} // closed once every master answered
	late    []answer      // the answers that came after the round returned; read once settled
}

// errNoAnswer is the error of a master whose answer the round did not wait for: its script may run.
var errNoAnswer = errors.New("rlock: no answer yet")

// answer is one master's reply to the acquire script.
type answer struct {
	i     int
	reply []int64
	err   error
}

// acquireRound runs the acquire script on every master at once. It returns as soon as a majority granted
// the lock, or once every master answered: the lock is not held any better by the last masters' grants,
// and waiting for them costs the slowest master's time on every acquisition. The calls still out finish
// in the background (each within the node timeout, whatever becomes of ctx), and the owner's next release
// or round of the lock waits for them (settle): a release that overtook a grant would leave that master
// holding the lock for a whole lease.
func (r redlockNodes) acquireRound(ctx context.Context, n names, owner string, held bool) *round {
	rd := &round{n: n, owner: owner, held: held, replies: make([][]int64, len(r.clients)),
		errs: slices.Repeat([]error{errNoAnswer}, len(r.clients)), settled: make(chan struct{})}
	id := roundID{n.lock, owner}
	r.settle(id)
	r.rounds.Store(id, rd)
	answers := r.ask(ctx, n, owner)
	for left := len(r.clients); left > 0; left-- {
		a := <-answers
		rd.replies[a.i], rd.errs[a.i] = a.reply, a.err
		if rd.grants() >= r.quorum && ctx.Err() == nil {
			go r.finish(id, rd, answers, left-1)
			return rd
		}
	}
	r.finish(id, rd, answers, 0)
	return rd
}

// ask runs the acquire script on every master at once, each call within the node timeout whatever becomes
// of ctx, and returns the channel their answers arrive on.
func (r redlockNodes) ask(ctx context.Context, n names, owner string) <-chan answer {
	answers := make(chan answer, len(r.clients))
	r.start(context.WithoutCancel(mayskip(ctx)), r.timeout, func(ctx context.Context, i int, c redis.UniversalClient) {
		reply, err := r.runAcquire(ctx, direct{c}, n, owner)
		answers <- answer{i, reply, err}
	})
	return answers
}

// roundID names the rounds of one owner on one lock.
type roundID struct{ lock, owner string }

// finish waits for the last answers of rd and marks the round settled.
func (r redlockNodes) finish(id roundID, rd *round, answers <-chan answer, left int) {
	for range left {
		rd.late = append(rd.late, <-answers)
	}
	close(rd.settled)
	r.rounds.CompareAndDelete(id, rd)
}

// settle waits until the last round of id has every answer: at most the node timeout, whatever the
// caller's context.
func (r redlockNodes) settle(id roundID) {
	if v, ok := r.rounds.Load(id); ok {
		<-v.(*round).settled
	}
}

// granted reports whether master i gave the lock to the owner.
func (rd *round) granted(i int) bool {
	return rd.errs[i] == nil && len(rd.replies[i]) == 3 && rd.replies[i][0] == 1
}

// mayHold reports whether master i may hold the lock for the owner because of this round: it granted it,
// or it did not answer (its script may have run) and the owner did not hold the lock already, whose count
// there must not be touched.
func (rd *round) mayHold(i int) bool {
	return rd.granted(i) || (rd.errs[i] != nil && !errors.Is(rd.errs[i], ErrMasterSkipped) && !rd.held)
}

// grants counts the masters that granted the lock.
func (rd *round) grants() int {
	n := 0
	for i := range rd.replies {
		if rd.granted(i) {
			n++
		}
	}
	return n
}

// tally is what the masters answered in one round.
type tally struct {
	got          int           // masters that granted the lock
	token, count int64         // the largest token and hold count among them
	pttl         time.Duration // the shortest lease left to another holder; < 0 unknown
	failures     []error       // *NodeError of the masters that failed
}

func (r redlockNodes) tally(rd *round) tally {
	t := tally{pttl: -1}
	for i, res := range rd.replies {
		a, err := parseAttempt(res)
		if rd.errs[i] != nil {
			a, err = attempt{}, rd.errs[i]
		}
		if err != nil {
			err = r.nodeError(i, err)
		}
		t.add(a, err)
	}
	return t
}

// add counts the answer of one master.
func (t *tally) add(a attempt, err error) {
	switch {
	case err != nil:
		t.failures = append(t.failures, err)
	case a.ok:
		t.got++
		t.token, t.count = max(t.token, a.token), max(t.count, a.count)
	case t.pttl < 0 || a.pttl < t.pttl:
		t.pttl = a.pttl
	}
}

// noQuorum says why a round missed the majority: nil when other owners hold the lock, ErrQuorum with the
// masters' failures when too many failed for a majority to answer.
func (r redlockNodes) noQuorum(failures []error) error {
	if len(failures) <= len(r.clients)-r.quorum {
		return nil
	}
	return joinFailures(failures, ErrQuorum)
}

// validity makes sure the token is safe to hand out and returns until when the lock is safe to use: an
// error when the majority took longer than the lease.
func (r redlockNodes) validity(ctx context.Context, rd *round, token int64, start time.Time) (time.Time, error) {
	if err := r.writeBackToken(ctx, rd, token); err != nil {
		return time.Time{}, err
	}
	valid := start.Add(r.lease - drift(r.lease))
	if !time.Now().Before(valid) {
		return time.Time{}, fmt.Errorf("%w: the majority took longer than the lease", ErrQuorum)
	}
	return valid, nil
}

// fail undoes a round that did not get the lock, and says when to try again: when another owner holds it,
// at the end of its lease (its unlock message wakes us sooner); after a failure, after a random delay.
func (r redlockNodes) fail(ctx context.Context, rd *round, pttl time.Duration, err error) attempt {
	quiet := r.undo(ctx, rd)
	if err != nil {
		pttl = retryAfterFailure()
	}
	return attempt{pttl: pttl, err: err, quiet: quiet}
}

// retryAfterFailure spreads the retries of processes that failed together.
func retryAfterFailure() time.Duration { return 20*time.Millisecond + rand.N(80*time.Millisecond) }

// writeBackToken makes sure a majority's fencing counters are at least token before it is used. Masters
// that answered token already need nothing; usually that is all of them.
func (r redlockNodes) writeBackToken(ctx context.Context, rd *round, token int64) error {
	have := 0
	for i, res := range rd.replies {
		if rd.granted(i) && res[1] == token {
			have++
		}
	}
	if have >= r.quorum {
		return nil
	}
	return r.raiseToken(ctx, rd.n, token)
}

// undo releases a failed round, even when the caller's context ended, on every master that may hold it.
// It reports whether it gave back a granted master, which publishes an unlock message.
func (r redlockNodes) undo(ctx context.Context, rd *round) (gaveBack bool) {
	ctx = context.WithoutCancel(ctx)
	<-rd.settled // a master that answers late is released after its answer, as it answered
	for _, a := range rd.late {
		rd.replies[a.i], rd.errs[a.i] = a.reply, a.err
	}
	requestID := uuid.NewString()
	r.each(ctx, func(ctx context.Context, i int, c redis.UniversalClient) {
		if rd.mayHold(i) {
			_, _ = r.runRelease(ctx, direct{c}, rd.n, rd.owner, requestID)
		}
	})
	return rd.grants() > 0
}
