// Package handlers holds the order pipeline's message schema and its Watermill handler.
//
// Order is what producers publish; Result is what the worker publishes back. Decode is the middleware
// that parses and validates each message once (bad input wraps ErrBadInput, for the poison stream);
// SKU gives the lock middleware its key; Reserver decides a batch of one SKU's orders in one stock script
// call under the lock's fencing token and makes their outcome events, which the worker publishes. The
// package reaches Redis only through inventory, and knows no lock library.
package handlers
