// Package inventory keeps the stock of each SKU in Redis and reserves it for orders exactly once.
//
// Every change is one Lua script, so it is atomic and costs one round trip. The scripts make all their
// checks before their first write: a call that returns an error has changed nothing.
//
// # Guarantees
//
//   - available never goes below 0, and available + reserved + fulfilled changes only through SetStock and
//     Restock (and stock.Set, the same script as SetStock): a reservation moves units from available to reserved, a cancel back, a fulfil from reserved
//     to fulfilled.
//   - An order is decided once. Reserve for an order that already has a recorded outcome returns that
//     outcome with Replayed set and changes nothing, whatever quantity it is called with, so a redelivered
//     order is never decremented twice. Release gives a reservation back once.
//   - ReserveBatch decides up to MaxBatch orders of one SKU in one script call, with the outcomes and
//     writes of a Reserve for each in turn; an error fails the whole batch and writes nothing.
//   - A fencing token below the highest one the SKU has seen is refused with ErrStaleFence, so a lock
//     holder that lost its lease cannot write after a newer holder did. Token 0 means unfenced.
//   - The scripts survive SCRIPT FLUSH and server restarts: they run with EVALSHA and fall back to EVAL.
//   - A call cut short by its context may or may not have been applied; calling again with the same order
//     id is always safe and returns what was decided.
//   - Every write survives a lost reply: see Resends.
//   - With WithReplicaAcks(n, timeout) a write returns nil only once n replicas have received it (Redis
//     WAIT on the write's own connection), else an error wrapping ErrReplicaAcks; the write stays applied
//     on the master either way. This narrows, but does not close, the window in which a failover loses an
//     acknowledged write: see WithReplicaAcks.
//
// # Resends
//
// go-redis sends a command again when its connection fails before the reply arrived (MaxRetries, 3 by
// default), although Redis may have run it: the most common ambiguous failure. Every script that writes is
// safe to resend; after the resend Redis holds what one call leaves and the call returns what Redis holds.
//
//	call                     a resend finds                              and returns
//	SetStock, Restock        its latch, stock:{SKU}:latch:<request id>   the first send's reply, writing nothing
//	RaiseFence               the fence at its token (raise-only)         nil; ErrStaleFence if a newer token came
//	Reserve, ReserveBatch    each order's outcome record                 the outcomes, Replayed
//	ReserveLines             each line's record                          the outcomes, Replayed
//	Release                  the record, released                        the released outcome, Replayed
//	Cancel, Fulfil           each line's record, cancelled or fulfilled  the outcome, Replayed
//	Cancel (before order)    the record the cancel left (early)          cancelled_early, Replayed
//
// A latch lives a minute; a second call (not a resend) is a new request, and a second Restock adds again.
//
// # Key layout
//
// Other clients rely on this layout (package stock reads and sets the stock hash). All keys of a SKU carry the hash tag {SKU}, and every script gets
// all the keys it touches in KEYS, so it runs in one Redis Cluster slot.
//
//	stock:{SKU}             hash    available (HINCRBY target), reserved, fulfilled, fence (highest fencing
//	                                token seen)
//	order:{SKU}:<order_id>  string  the outcome recorded for the order, expiring after the outcome TTL:
//	                                {"status":"reserved","reason":"","quantity":2,"available_after":8,"fence":7}
//	stock:{SKU}:latch:<id>  string  the reply of stock write <id> (SetStock, stock.Set, Restock), for a minute
//
// An order id is scoped to its SKU. The outcome TTL (DefaultOutcomeTTL, WithOutcomeTTL) is the
// idempotency window: it must outlast the longest time an order can be redelivered, and a Release must
// come within it. A SKU exists once it has an available field; a Reserve for a SKU that does not exist is
// rejected with ReasonUnknownSKU and leaves no stock hash behind.
package inventory
