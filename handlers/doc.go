// Package handlers is the order handler: the Watermill handler that decides each order (the events of
// package order), in the order of the design card:
//
//	Decode ▶ Combine ▶ (the lock middleware, lockmw) ▶ Handle: reserve ▶ outcome (then the Router acks)
//
// Decode parses and validates each message once (order.Decode: bad input wraps order.ErrBadInput, for the poison stream) and
// gives a cancel or fulfil the lines of its order. Combine lets one consumer per SKU lead: the SKU's other
// orders in this process wait there and are decided in the leader's batches. Handle runs inside the SKU's
// exclusive section, which the lock middleware obtained in a way the handler does not need to know (the
// fencing token it gets is 0 without a lock, and an elided section makes the stock script take the lock
// itself); it decides a batch in one stock script call (inventory) and publishes the outcome events in one
// script call per partition (redisstream.Commit), for the entries still its consumer's, and returns: the Router
// acks the message, which acks its entry. An entry claimed by another consumer meanwhile gets no outcome
// from this worker and fails with ErrClaimed, so that the Router nacks it.
package handlers
