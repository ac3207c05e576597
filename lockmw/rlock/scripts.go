package rlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed acquire.lua
	acquireLua    string
	acquireScript = redis.NewScript(acquireLua)

	//go:embed release.lua
	releaseLua    string
	releaseScript = redis.NewScript(releaseLua)

	//go:embed renew.lua
	renewLua    string
	renewScript = redis.NewScript(renewLua)

	//go:embed raisetoken.lua
	raiseTokenLua    string
	raiseTokenScript = redis.NewScript(raiseTokenLua)

	//go:embed undo.lua
	undoLua    string
	undoScript = redis.NewScript(undoLua)

	//go:embed forcerelease.lua
	forceReleaseLua    string
	forceReleaseScript = redis.NewScript(forceReleaseLua)

	//go:embed ttl.lua
	ttlLua    string
	ttlScript = redis.NewScript(ttlLua)
)

// latchTTL is how long a request latch remembers a request's outcome: longer than go-redis takes to send a
// command again after a lost connection (MaxRetries 3, each within its timeouts) and than this package's
// own retries of a release; an undo's latch also outlasts a late copy of the request it undid.
const latchTTL = 10 * time.Second

// latchTTLArg is latchTTL as a script argument (see scriptArgs).
var latchTTLArg any = latchTTL.Milliseconds()

// scripts runs the lock scripts on one server, with a locker's lease, fencing counter TTL and publish
// command. Both backends use it: Reentrant on its one server, Redlock on each master.
type scripts struct {
	lease    time.Duration
	tokenTTL time.Duration
	publish  string // the command of unlock messages: publish, or spublish when sharded
	args     scriptArgs
}

// scriptArgs are a locker's lease, fencing counter TTL (in milliseconds) and publish command as script
// arguments, put in interfaces once: a number or a string put in an interface allocates, and every call of
// the lock's common cycle would pay that.
type scriptArgs struct{ lease, tokenTTL, publish any }

func newScripts(cfg Config, sharded bool) scripts {
	s := scripts{lease: cfg.Lease, tokenTTL: cfg.TokenTTL, publish: "publish"}
	if sharded {
		s.publish = "spublish"
	}
	s.args = scriptArgs{lease: s.lease.Milliseconds(), tokenTTL: s.tokenTTL.Milliseconds(), publish: s.publish}
	return s
}

// runner runs a script on one Redis: a batcher, or a client directly.
type runner interface {
	run(ctx context.Context, script *redis.Script, keys []string, args ...any) *redis.Cmd
}

// direct runs scripts on c, one round trip each.
type direct struct{ c redis.Scripter }

func (d direct) run(ctx context.Context, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	return runScript(ctx, d.c, script, keys, args...)
}

// runScript runs script as Script.Run does: by its SHA, and by its source when the server does not know it.
// A NOSCRIPT reply says the script did not run: the sends of the call do not count (see sends).
func runScript(ctx context.Context, c redis.Scripter, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	s := sendsIn(args)
	before := s.count()
	cmd := script.EvalSha(ctx, c, keys, args...)
	if err := cmd.Err(); err == nil || !redis.HasErrorPrefix(err, "NOSCRIPT") { // HasErrorPrefix allocates
		return cmd
	}
	s.rewind(before)
	return script.Eval(ctx, c, keys, args...)
}

// request is one acquisition request: the acquire script run once (on each Redlock master), or undone.
type request struct {
	n     names
	owner string
	id    string // names the request's latch, which makes a resend of the request and its undo exact
	held  bool   // the caller holds the lock for owner already: a reentry
}

// runAcquire runs the acquire script of req, its reply as {1, token, count} or {0, pttl}.
func (s scripts) runAcquire(ctx context.Context, r runner, req request) ([]int64, error) {
	keys, args := s.acquireArgs(req)
	return acquireReply(r.run(ctx, acquireScript, keys, args...))
}

// acquireArgs are the keys and arguments of req's acquire script. A fresh acquisition, the common call,
// passes only the lease and the owner (and the counter's TTL when there is one): the flag and the latch
// lifetime after them are read by a reentry only, and every argument costs Redis a little on every call.
func (s scripts) acquireArgs(req request) (keys []string, args []any) {
	keys = []string{req.n.lock, req.n.token, req.n.latch(req.id)}
	switch {
	case req.held:
		return keys, []any{s.args.lease, req.owner, s.args.tokenTTL, 1, latchTTLArg}
	case s.tokenTTL > 0:
		return keys, []any{s.args.lease, req.owner, s.args.tokenTTL}
	}
	return keys, []any{s.args.lease, req.owner}
}

// acquireReply reads the reply of the acquire script as {1, token, count} or {0, pttl}.
func acquireReply(cmd *redis.Cmd) ([]int64, error) {
	if token, ok := bare(cmd); ok { // took the lock for a caller that held nothing
		return []int64{1, token, 1}, nil
	}
	return cmd.Int64Slice()
}

// runUndo undoes acquisition request req, whether it ran, runs later or never does.
func (s scripts) runUndo(ctx context.Context, r runner, req request) error {
	return r.run(ctx, undoScript, []string{req.n.lock, req.n.channel, req.n.latch(req.id)},
		req.owner, flag(req.held), latchTTLArg, s.args.publish).Err()
}

func flag(b bool) int {
	if b {
		return 1
	}
	return 0
}

// releaseReply is the outcome of a release: the holds left for the owner (0: the lock is free; -1: the
// owner did not hold it) and how many clients received the unlock message.
type releaseReply struct{ left, receivers int64 }

// unlock is one release request: one hold of owner's, released by the release script on each server (a
// Redlock's masters) under one id, however often the request is sent there.
type unlock struct {
	n     names
	owner string
	token int64   // the hold's: a later send tells the owner's next hold by a larger counter
	id    string  // names the request's latch
	sent  []sends // per server: whether the request went out before
}

func newUnlock(h *hold, id string, servers int) *unlock {
	return &unlock{n: h.names, owner: h.redisOwner, token: h.token, id: id, sent: make([]sends, servers)}
}

// runRelease runs the release script of req on server i, with keys from releaseKeys (the same on every
// server).
func (s scripts) runRelease(ctx context.Context, r runner, req *unlock, keys []string, i int) (releaseReply, error) {
	return parseRelease(r.run(ctx, releaseScript, keys, s.releaseArgs(req, i)...))
}

// queueRelease queues the release script of req on pipe (one server's), by its SHA: a server that lost its
// scripts answers NOSCRIPT, and the caller sends it again with runRelease.
func (s scripts) queueRelease(ctx context.Context, pipe redis.Pipeliner, req *unlock) *redis.Cmd {
	return releaseScript.EvalSha(ctx, pipe, releaseKeys(req), s.releaseArgs(req, 0)...)
}

// releaseKeys are the keys of req's release script.
func releaseKeys(req *unlock) []string {
	return []string{req.n.lock, req.n.channel, req.n.latch(req.id), req.n.token}
}

// releaseArgs are the arguments of req's release script on server i.
func (s scripts) releaseArgs(req *unlock, i int) []any {
	return []any{req.owner, s.args.lease, latchTTLArg, s.args.publish, &req.sent[i], req.token}
}

// runForceRelease deletes the lock of n whoever holds it and reports whether there was one.
func (s scripts) runForceRelease(ctx context.Context, c redis.Scripter, n names, requestID string) (bool, error) {
	deleted, err := forceReleaseScript.Run(ctx, c, []string{n.lock, n.channel, n.latch(requestID)},
		s.args.publish, latchTTLArg).Int64()
	return deleted == 1, err
}

// bare returns the reply of a script that answered a bare integer; false for a table, or when the call
// failed (a failed pipeline gives its error to replies it read already).
func bare(cmd *redis.Cmd) (int64, bool) {
	n, ok := cmd.Val().(int64)
	return n, ok && cmd.Err() == nil
}

// parseRelease reads the reply of the release script.
func parseRelease(cmd *redis.Cmd) (releaseReply, error) {
	if left, ok := bare(cmd); ok { // no unlock message received
		return releaseReply{left: left}, nil
	}
	res, err := cmd.Int64Slice()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("unexpected release reply %v", res)
	}
	if err != nil {
		return releaseReply{}, err
	}
	return releaseReply{left: res[0], receivers: res[1]}, nil
}

func (s scripts) runRaiseToken(ctx context.Context, c redis.Scripter, n names, token int64) error {
	return raiseTokenScript.Run(ctx, c, []string{n.token}, token, s.args.tokenTTL).Err()
}

// runTTL returns the remaining lease of owner's lock on one server; < 0 when owner does not hold it.
func runTTL(ctx context.Context, c redis.Scripter, n names, owner string) (time.Duration, error) {
	ms, err := ttlScript.Run(ctx, c, []string{n.lock}, owner).Int64()
	if ms < 0 {
		return -1, err
	}
	return time.Duration(ms) * time.Millisecond, err
}

// parseAttempt reads the reply of the acquire script.
func parseAttempt(res []int64) (attempt, error) {
	switch {
	case len(res) == 3 && res[0] == 1:
		return attempt{ok: true, token: res[1], count: res[2]}, nil
	case len(res) == 2 && res[0] == 0:
		return attempt{pttl: time.Duration(res[1]) * time.Millisecond}, nil
	}
	return attempt{}, fmt.Errorf("unexpected acquire reply %v", res)
}

// renewAll renews many holds on one server for at least lease, in one pipelined round trip.
func renewAll(ctx context.Context, rdb redis.UniversalClient, hs []*hold, lease time.Duration) []error {
	errs, noScript := renewPipelined(ctx, rdb, hs, lease)
	if !noScript {
		return errs
	}
	// The script cache was flushed (or the server restarted): load it and go again.
	if err := renewScript.Load(ctx, rdb).Err(); err != nil {
		return fill(errs, err)
	}
	errs, _ = renewPipelined(ctx, rdb, hs, lease)
	return errs
}

// renewPipelined sends the renewals of hs in one pipeline. noScript reports that the server did not know
// the script.
func renewPipelined(ctx context.Context, rdb redis.UniversalClient, hs []*hold, lease time.Duration) (errs []error, noScript bool) {
	cmds := make([]*redis.Cmd, len(hs))
	pipe := rdb.Pipeline()
	for i, h := range hs {
		cmds[i] = renewScript.EvalSha(ctx, pipe, []string{h.names.lock}, lease.Milliseconds(), h.redisOwner)
	}
	_, _ = pipe.Exec(ctx)
	errs = make([]error, len(hs))
	for i, c := range cmds {
		errs[i] = renewal(c)
		noScript = noScript || redis.HasErrorPrefix(errs[i], "NOSCRIPT")
	}
	return errs, noScript
}

// renewal reads the reply of the renew script: nil (renewed), ErrNotHeld or the error.
func renewal(c *redis.Cmd) error {
	renewed, err := c.Int64()
	switch {
	case err != nil:
		return err
	case renewed == 0:
		return ErrNotHeld
	}
	return nil
}

// fill replaces the unknown outcomes in errs with err.
func fill(errs []error, err error) []error {
	for i := range errs {
		if errs[i] != nil && !errors.Is(errs[i], ErrNotHeld) {
			errs[i] = err
		}
	}
	return errs
}
