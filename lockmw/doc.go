// Package lockmw is the Watermill middleware that runs each message's handler under a per-key distributed
// lock: Middleware acquires the lock of the message's key, runs the handler under the lease's context and
// releases the lock afterwards. A message that needs several keys (Middleware.Keys: an order of several
// SKUs) gets all their locks or none, taken in sorted order within one wait for the set (Middleware.Wait,
// rlock.AcquireAll), and runs under the rlock.MultiLease (MultiLeaseFrom), whose context ends when any of
// its locks is lost. LeasesFrom finds the leases of either path, to hand their fencing tokens on.
//
// A step ahead of the middleware may name a message's keys and its other ways into their section
// (WithKeys): elided (MayElide: the handler's own write takes the lock) and batched (MayBatch: the Batcher,
// a step between that one and the middleware, lets the messages of one key wait to be handled in the
// batches of the first, which alone obtains the section).
//
// The locks themselves (reentrant Redisson-layout locks with a watchdog and fencing tokens, on one Redis
// or by Redlock on a majority of masters) are package rlock, which imports no Watermill: use it directly
// to lock anything else.
package lockmw
