// Package rlock provides per-key distributed locks on Redis, with no messaging framework attached: import it
// to lock anything. It is a Go module of its own (Go 1.25+, Redis 6.2+; sharded pub/sub needs Redis 7) that
// requires only go-redis and the OpenTelemetry API; the Watermill middleware that takes these locks around
// handlers in stockflow is the parent package, lockmw, which is not part of this module.
//
// The name is Redisson's RLock, whose layout both lockers keep, so Java services using Redisson and Go
// services using rlock exclude each other: Reentrant on a single Redis, and Redlock on a majority of
// independent Redis masters (a quorum of RLocks, as Redisson's RedissonRedLock). They share one contract
// (Locker, Lease):
//
//	lock:{KEY}                          hash: field = owner id, value = reentry count; PEXPIRE = lease
//	redisson_lock__channel:lock:{KEY}   pub/sub: "0" is published when the lock is freed (SPUBLISH if sharded)
//	redisson_lock_token:lock:{KEY}      string: fencing counter, INCR on every fresh acquisition
//	redisson_unlock_latch:lock:{KEY}:R  string: the outcome of request R, for 10 s, where a resend needs it
//
// Config.KeyPrefix replaces "lock:" (the other names follow from the lock's name, by Redisson's rule;
// Config.LockKey, TokenKey and ChannelKey spell them). A key may not contain braces: {KEY} is the Redis
// Cluster hash tag that keeps a lock's keys in one slot, and a brace in KEY would move it (ErrInvalidKey).
// A store on the same slot, for example "stock:{KEY}", can then read the lock and the counter in its own
// scripts. The fencing counter outlives the lock: it is kept forever by default, as Redisson keeps it (one
// small string per key ever locked); Config.TokenTTL makes it expire after a time without acquisitions.
//
// AcquireAll takes the locks of several keys all or none, in sorted order so that callers whose key sets
// overlap never deadlock (Redisson's MultiLock); WithWaitDeadline bounds one wait shared by the set. All
// are taken by one owner, so an Acquire under the MultiLease's Context re-enters, and that context ends
// when any of the leases ends (ErrLockLost when one is lost).
//
// Locks are reentrant per owner: a lease's context carries its owner, so an Acquire under lease.Context()
// (a nested call in the same unit of work) re-enters instead of waiting for itself; WithOwner names an
// owner explicitly. They are kept alive by one watchdog per process while held, and fenced: every fresh
// acquisition gets a strictly larger token, which the guarded store checks so a holder whose lease was
// lost cannot overwrite newer work. A lease whose lock is lost cancels its context with cause ErrLockLost.
// Waiters in one process queue first come first served, and only the head of each key's queue talks to
// Redis; it is woken by the unlock message over the process's single pub/sub connection, with a fallback
// retry at the holder's remaining lease in case a message is lost or the holder crashed.
//
// On a Redis Cluster (NewReentrant given a *redis.ClusterClient) the unlock messages are sharded, as
// Redisson's in its sharded subscription mode: the release script sends them with SPUBLISH, so they stay
// on the shard of the lock's slot instead of being broadcast to every node, and waiters listen with
// SSUBSCRIBE, on a connection per key with waiters to the master of its slot. Config.ShardedPubSub
// chooses, for the Redisson clients sharing the locks must choose alike.
//
// A release while another acquisition of the key waits in the same process hands the lock to that waiter
// without a Redis call (lock cohorting: Dice, Marathe and Shavit, PPoPP 2012): the process keeps the lock in
// Redis under the owner id that took it, and its waiters, each its own owner, take turns under the token
// Redis issued. Config.HandOff bounds a cohort (32 hand-offs, 20 ms by default); then the lock is freed in
// Redis, and when the unlock message reached another process, no acquisition of the key here tries for
// 5 ms, so processes take turns on a hot key. N hand-offs cost one acquire and one release script in all.
// ReleaseIn sends a release in the caller's own pipeline.
//
// Concurrent acquisitions and releases of different keys share round trips: on one server (a *redis.Client)
// a script call made while two round trips are out waits for the first to come back and goes with every call
// queued meanwhile, in one pipeline (the client and Redis then pay one write and one read for the batch);
// a lone call goes at once. Redlock returns from an acquisition as soon as a majority granted it; the
// answers still out are awaited by the owner's release.
//
// Resent calls: go-redis sends a command again when its connection broke before the reply (MaxRetries), so
// Redis may run it twice, and a timed-out call may reach Redis after its undo. Every call that changes Redis
// is safe to resend; none relies on not being resent:
//
//	call                          rule
//	acquire, caller holds none    idempotent: the owner's hold it finds is its own; count 1, same token
//	acquire, reentry              request id + latch: answers the latched count and token
//	undo of a failed acquisition  request id + latch: takes back what the request did, latches "undone";
//	                              the request, arriving late, then does nothing
//	release of a reentrant hold   request id + latch: answers the latched holds left
//	release of the last hold      request id + send count: a later send that finds the hold gone answers
//	                              it freed, one that finds the owner's next hold (the fencing counter past
//	                              the hold's token) leaves it; each latches that for a copy of an earlier
//	                              send still on its way
//	renew, Lease.Extend           idempotent: at least the lease from now; the lease here counts from the send
//	RaiseToken                    idempotent: at least the token
//	ForceRelease                  request id + latch: answers the latched outcome
//
// A latch is Redisson's unlock latch key with the request's own id, alive 10 s. Only what a resend could
// get wrong is latched: the common cycle, a fresh acquisition and the release of its only hold, writes none
// (a key with an expiry per request cost the uncontended lock a fifth of its Redis CPU). A release knows
// its first send from a later one because one of its arguments counts how often go-redis wrote it. What a
// later send cannot tell: a hold gone because its first send freed it, or because it ended meanwhile
// (expired, ForceRelease) with the first send lost before Redis; it answers freed, and the lock is not held
// either way. And a counter raised past the hold's token while it was held (RaiseToken; on a Redlock master
// whose counter ran ahead of the others') makes a later send leave the hold, which then lasts its lease.
//
// Errors read as one line ("rlock: lock not obtained: context deadline exceeded") and match every cause
// with errors.Is and errors.As: ErrNotObtained with ctx.Err(), ErrQuorum with each master's *NodeError.
//
// Telemetry: a span per acquisition ("lock acquire") and the metrics rlock.wait, rlock.hold and rlock.lost,
// with attributes under rlock.* (rlock.key, rlock.mode, rlock.result, ...; Config.TelemetryPrefix renames
// metrics and attributes alike), from Config.TracerProvider and Config.MeterProvider (the global providers
// by default), under the instrumentation scope github.com/stockflow/stockflow/lockmw/rlock.
package rlock
