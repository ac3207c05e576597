// Package lockmw provides per-key distributed locks on Redis, and the Watermill middleware that takes them.
//
// Two lockers share one contract (Locker, Lease): Reentrant on a single Redis, and Redlock on a majority of
// independent Redis masters. Both keep locks in Redisson's RLock layout, so Java services using Redisson and
// stockflow workers exclude each other:
//
//	lock:{KEY}                          hash: field = owner id, value = reentry count; PEXPIRE = lease
//	redisson_lock__channel:lock:{KEY}   pub/sub: "0" is published when the lock is freed
//	redisson_lock_token:lock:{KEY}      string: fencing counter, INCR on every fresh acquisition
//
// Locks are reentrant per owner (WithOwner), kept alive by one watchdog per process while held, and
// fenced: every fresh acquisition gets a strictly larger token, which the guarded store checks so a holder
// whose lease was lost cannot overwrite newer work. A lease whose lock is lost cancels its context with
// cause ErrLockLost. Waiters in one process queue first come first served, and only the head of each key's
// queue talks to Redis; it is woken by the unlock message over the process's single pub/sub connection,
// with a fallback retry at the holder's remaining lease in case a message is lost or the holder crashed.
package lockmw
