package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/lockmw"
)

// Decode is a middleware that decodes and validates the order of each message once and puts it in the
// message context (OrderFrom), for the lock middleware's key and the handler.
func Decode(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		o, err := DecodeOrder(msg.Payload)
		if err != nil {
			return nil, err
		}
		msg.SetContext(WithOrder(msg.Context(), o))
		return h(msg)
	}
}

// SKU is the lock key of a message: the SKU of its order. It needs Decode to have run.
func SKU(msg *message.Message) (string, error) {
	o, ok := OrderFrom(msg.Context())
	if !ok {
		return "", fmt.Errorf("%w: message %s was not decoded", ErrBadInput, msg.UUID)
	}
	return o.SKU, nil
}

// Reserver is the order handler: it reserves stock for the order and publishes the outcome.
type Reserver struct {
	Store *inventory.Store
	// Results publishes the outcome events. It must outlive the router (not a handler's own publisher,
	// which the router closes while handlers may still run).
	Results      message.Publisher
	ResultsTopic string
	// Worker names this worker in outcome events.
	Worker string
	// DelayWrite is fault injection for chaos tests, 0 in production: each stock write is held back this
	// long after the lock was taken and then sent even if the lease was lost meanwhile, as a write stuck
	// in a stalled network or a paused process would be. The fencing token is what must refuse it.
	DelayWrite time.Duration
}

// Handle reserves the order of msg (decoded by Decode) with the fencing token of the lease the lock
// middleware holds (unfenced without one), then publishes the outcome. An error leaves the message to be
// retried: the reservation is idempotent, so a retry returns the outcome decided the first time.
func (r *Reserver) Handle(msg *message.Message) error {
	ctx := msg.Context()
	o, ok := OrderFrom(ctx)
	if !ok {
		var err error
		if o, err = DecodeOrder(msg.Payload); err != nil {
			return err
		}
	}
	var token int64
	var waited time.Duration
	if lease, ok := lockmw.LeaseFrom(ctx); ok {
		token, waited = lease.Token(), lockmw.StatsOf(lease).Waited
	}
	if r.DelayWrite > 0 {
		time.Sleep(r.DelayWrite)
		ctx = context.WithoutCancel(ctx)
	}
	out, err := r.Store.Reserve(ctx, o.OrderID, o.SKU, o.Quantity, token)
	if err != nil {
		return fmt.Errorf("reserve order %s: %w", o.OrderID, err)
	}
	payload, err := json.Marshal(Result{Outcome: out, Worker: r.Worker, ProcessedAt: time.Now().UTC(),
		LockWaitMs: float64(waited.Microseconds()) / 1000})
	if err != nil {
		return err
	}
	res := message.NewMessage(watermill.NewUUID(), payload)
	res.SetContext(ctx)
	if err := r.Results.Publish(r.ResultsTopic, res); err != nil {
		return fmt.Errorf("publish outcome of order %s: %w", o.OrderID, err)
	}
	return nil
}
