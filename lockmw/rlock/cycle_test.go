package rlock

import (
	"context"
	"maps"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/lockmw/rlock/internal/redistest"
)

// What an uncontended cycle (a fresh acquisition and the release of its only hold) costs each server of
// the lock: one round trip each way, an EVALSHA, and eight commands in Redisson's layout, EXISTS (of the
// lock and the acquisition's undo latch), HSET, PEXPIRE and INCR (the fencing counter) to take it, GET (the
// release's latch, for a copy of the release that a later send overtook), HGET, DEL and PUBLISH to free
// it. Issue 45: this is the lock's most common call, and every command and argument costs Redis CPU.
func TestAnUncontendedCycleIsTwoScriptsOfEightCommands(t *testing.T) {
	const cycles = 5
	want := map[string]int{"evalsha": 2 * cycles, "exists": cycles, "hset": cycles, "pexpire": cycles,
		"incr": cycles, "get": cycles, "hget": cycles, "del": cycles, "publish": cycles}
	_, cases := lockers(t, Config{})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			warmUp(t, c.locker) // the scripts loaded and the connections open, as in a running process
			admin := make([]*redis.Client, len(c.servers))
			for i, s := range c.servers {
				admin[i] = s.Client()
				admin[i].ConfigResetStat(ctx)
			}
			key := c.name // a key of its own: a counter behind on some masters would add a write-back
			for range cycles {
				if err := mustAcquire(t, c.locker, ctx, key).Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			settled(c.locker)
			for i, rdb := range admin {
				got := commandCalls(t, rdb)
				for _, own := range []string{"config|resetstat", "info", "ping"} { // the test's, a health check
					delete(got, own)
				}
				if !maps.Equal(got, want) {
					t.Errorf("server %d ran %v in %d cycles, want %v", i, got, cycles, want)
				}
			}
		})
	}
}

// A fresh acquisition sends only what its script reads: the lease and the owner, after the lock, the
// fencing counter and its undo latch; a reentry adds the flag and the latch lifetime it needs. A Reentrant
// makes one round trip per call when alone: no pipeline, no other command.
func TestAFreshAcquisitionSendsTwoArguments(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client()
	var sent commandLog
	rdb.AddHook(&sent)
	l, err := NewReentrant(rdb, Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()
	warmUp(t, l) // the scripts loaded
	sent.reset()
	lease := mustAcquire(t, l, ctx, "k")
	inner := mustAcquire(t, l, lease.Context(), "k")
	for _, held := range []Lease{inner, lease} {
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// evalsha, sha, numkeys, 3 keys; then the arguments
	wantArgs := []int{6 + 2, 6 + 5, 7 + 6, 7 + 6} // fresh, reentry, release (4 keys) of each
	if sent.pipelines > 0 || len(sent.args) != len(wantArgs) {
		t.Fatalf("sent %d commands and %d pipelines for an acquisition, a reentry and their releases, "+
			"want %d commands alone", len(sent.args), sent.pipelines, len(wantArgs))
	}
	for i, args := range sent.args {
		if args[0] != "evalsha" || len(args) != wantArgs[i] {
			t.Errorf("command %d: %v, want an evalsha of %d arguments", i, args, wantArgs[i])
		}
	}
}

// commandLog is a go-redis hook that notes the arguments of each command the client sends alone, and counts
// its pipelines.
type commandLog struct {
	mu        sync.Mutex
	args      [][]any
	pipelines int
}

func (h *commandLog) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.args, h.pipelines = nil, 0
}

func (h *commandLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *commandLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.mu.Lock()
		h.args = append(h.args, cmd.Args())
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (h *commandLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		h.pipelines++
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}
