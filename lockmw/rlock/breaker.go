package rlock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrMasterSkipped is the error of a call Redlock did not send: its master failed to answer within the
// last MasterCooldown, and the others suffice for a majority.
var ErrMasterSkipped = errors.New("rlock: master skipped after a recent failure")

// MasterCooldown is how long Redlock skips a master that failed to answer (a timeout, a refused or broken
// connection), while the other masters suffice for a majority.
const MasterCooldown = time.Second

// breakers spare Redlock the node timeout of masters that are down or cut off. Without them every
// acquisition and release waits NodeTimeout for each dead master: with one master of three cut off, a hot
// SKU managed about 8 orders per second instead of hundreds. A master that failed to answer (its node
// timeout ran out, or its connection failed) is skipped by the calls on an order's path (acquire, the
// token write-back, release, TTL: those whose context is marked with mayskip) for MasterCooldown: they
// fail at once with ErrMasterSkipped. Renewals, undos and the background repeat of a release still go to
// every master, so a slow master keeps its copy of a held lock and gets back what a failed round left;
// their answers close the breaker again. At most the masters beyond a majority are skipped at once: when
// more are failing, every call goes to every master, so the breakers never turn a reachable majority into
// a lost one. Skipping is as safe as a timeout, and more certain: the call was not sent.
type breakers struct {
	until    []atomic.Int64 // unix ns until which master i is skipped; 0: answering
	spare    int            // masters that may be skipped at once: those beyond a majority
	cooldown time.Duration
	now      func() time.Time
}

func newBreakers(masters, quorum int) *breakers {
	return &breakers{until: make([]atomic.Int64, masters), spare: masters - quorum, cooldown: MasterCooldown,
		now: time.Now}
}

// errNodeTimeout is the cause of a call's context when its node timeout ran out (eachWithin), as opposed
// to its caller's deadline or cancellation, which say nothing about the master.
var errNodeTimeout = errors.New("rlock: node timeout")

type mayskipKey struct{}

// mayskip marks ctx: its calls may be skipped on a master whose breaker is open.
func mayskip(ctx context.Context) context.Context { return context.WithValue(ctx, mayskipKey{}, true) }

// skip reports whether a call under ctx to master i is to be skipped now.
func (b *breakers) skip(ctx context.Context, i int) bool {
	now := b.now().UnixNano()
	if ctx.Value(mayskipKey{}) == nil || b.until[i].Load() <= now {
		return false
	}
	failing := 0
	for j := range b.until {
		if b.until[j].Load() > now {
			failing++
		}
	}
	return failing <= b.spare
}

// observe records how a call to master i under ctx ended: an answer (a reply, or an error reply) closes its
// breaker; its own node timeout or a failed connection opens it; a call its caller ended says nothing.
func (b *breakers) observe(ctx context.Context, i int, err error) {
	switch {
	case err == nil, isReply(err):
		b.until[i].Store(0)
	case errors.Is(err, ErrMasterSkipped), ctx.Err() != nil && context.Cause(ctx) != errNodeTimeout:
	default:
		b.until[i].Store(b.now().Add(b.cooldown).UnixNano())
	}
}

// isReply reports whether err is an error reply from Redis: the master answered. (Out of observe: its target
// would escape to the heap on every call, an allocation per answer.)
func isReply(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply)
}

// hook returns the go-redis hook of master i.
func (b *breakers) hook(i int) redis.Hook { return breakerHook{b: b, i: i} }

type breakerHook struct {
	b *breakers
	i int
}

func (h breakerHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h breakerHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h.process(ctx, func() error { return next(ctx, cmd) }, cmd)
	}
}

func (h breakerHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return h.process(ctx, func() error { return next(ctx, cmds) }, cmds...)
	}
}

// process sends cmds with send unless the master is to be skipped, when they fail with ErrMasterSkipped
// unsent, and records how the call ended.
func (h breakerHook) process(ctx context.Context, send func() error, cmds ...redis.Cmder) error {
	if h.b.skip(ctx, h.i) {
		err := fmt.Errorf("%w (for %v)", ErrMasterSkipped, h.b.cooldown)
		for _, cmd := range cmds {
			cmd.SetErr(err)
		}
		return err
	}
	err := send()
	h.b.observe(ctx, h.i, err)
	return err
}
