// Package handlers is the order handler: the Watermill handler that decides each order (the events of
// package order) in the exclusive section of its SKUs, in the order of the design card:
//
//	(delivery.Decoder) ▶ (lockmw.Batcher ▶ lockmw.Middleware) ▶ Handle: reserve ▶ outcome (then the Router acks)
//
// The worker's delivery steps decode each message once (delivery.Decoder: the order goes in the message
// context, order.FromContext, with its lock keys); the lock middleware's Batcher lets one consumer per SKU
// lead, the SKU's other single-SKU orders in this process waiting there to be decided in the leader's
// batches. Handle runs inside the SKU's exclusive section, which the lock middleware obtained in a way the
// handler does not need to know (the fencing token it gets is 0 without a lock, and an elided section
// makes the stock script take the lock itself): the leader takes its SKU's waiting orders from the Batcher
// in batches (lead), decides each batch in one stock script call (inventory), with the batches of the other
// SKUs ready at that moment in one pipeline (the commit round), and publishes the outcome events through
// Config.Outcomes, each the answer to its order's entry (redisstream.Answer: written only while the entry
// is still its consumer's, one script call per partition in one round trip), and returns: the
// Router acks the message, which acks its entry. An entry claimed by another consumer meanwhile gets no
// outcome from this worker and fails with ErrClaimed, so that the Router nacks it.
package handlers
