package rlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// acquire runs one round of the acquire script on every master and tallies it: with a majority and time
// left the lock is kept, otherwise the round is undone on every master that may hold it.
func (r redlockNodes) acquire(ctx context.Context, req request) (attempt, error) {
	start := time.Now()
	rd := r.acquireRound(ctx, req)
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
	req     request
	replies [][]int64
	errs    []error           // errNoAnswer for a master that had not answered when the round returned
	settled <-chan struct{}   // closed once every master answered
	late    []answer[[]int64] // the answers that came after the round returned; read once settled
}

// acquireRound runs the acquire script on every master at once. It returns as soon as a majority granted
// the lock (the lock is not held any better by the last masters' grants), or once every master answered.
func (r redlockNodes) acquireRound(ctx context.Context, req request) *round {
	rd := &round{req: req, replies: make([][]int64, len(r.clients)),
		errs: slices.Repeat([]error{errNoAnswer}, len(r.clients))}
	keys, args := r.acquireArgs(req) // the same on every master
	rd.settled = gather(r, ctx, req.n.lock, fanOut[[]int64]{
		call: func(ctx context.Context, _ int, c redis.UniversalClient) ([]int64, error) {
			return acquireReply(runScript(ctx, c, acquireScript, keys, args...))
		},
		take: func(a answer[[]int64]) bool {
			rd.replies[a.i], rd.errs[a.i] = a.val, a.err
			return rd.grants() >= r.quorum && ctx.Err() == nil
		},
		rest: func(_ *lane, late []answer[[]int64]) { rd.late = late },
	})
	return rd
}

// granted reports whether master i gave the lock to the owner.
func (rd *round) granted(i int) bool {
	return rd.errs[i] == nil && len(rd.replies[i]) == 3 && rd.replies[i][0] == 1
}

// mayHold reports whether master i may hold the lock for the owner because of this round: it granted it,
// or it did not answer (its script may have run, or may still run: the undo leaves it nothing to do).
func (rd *round) mayHold(i int) bool {
	return rd.granted(i) || (rd.errs[i] != nil && !errors.Is(rd.errs[i], ErrMasterSkipped))
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
		if rd.errs[i] == errNoAnswer { // the round returned without it, with a majority: nothing to count
			continue
		}
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
	return r.raiseToken(ctx, rd.req.n, token)
}

// undo takes back a failed round, even when the caller's context ended, on every master that may hold it
// (by the round's request id: exactly what the round did there, even if its script arrives after the undo).
// It reports whether it gave back a granted master, which publishes an unlock message.
func (r redlockNodes) undo(ctx context.Context, rd *round) (gaveBack bool) {
	ctx = context.WithoutCancel(ctx)
	<-rd.settled // a master that answers late is released after its answer, as it answered
	for _, a := range rd.late {
		rd.replies[a.i], rd.errs[a.i] = a.val, a.err
	}
	r.each(ctx, func(ctx context.Context, i int, c redis.UniversalClient) {
		if rd.mayHold(i) {
			_ = r.runUndo(ctx, direct{c}, rd.req)
		}
	})
	return rd.grants() > 0
}
