package inventory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/order"
)

// Record is the outcome recorded for an order on one of its SKUs: its idempotency record
// (order:{SKU}:<order_id>), as operators ask about it.
type Record struct {
	OrderID        string       `json:"order_id"`
	SKU            string       `json:"sku"`
	Status         order.Status `json:"status"`
	Reason         order.Reason `json:"reason,omitempty"`
	Quantity       int64        `json:"quantity"`
	AvailableAfter int64        `json:"available_after"`
	Fence          int64        `json:"fence"`
	// Early marks the record a cancel left when it came before its order.
	Early bool `json:"early,omitempty"`
	// Lines are a basket's lines (read from its least SKU's record when sku is another of its lines).
	Lines []order.Line `json:"lines,omitempty"`
	// ExpiresIn is how long the record is still kept (OUTCOME_TTL from its last write).
	ExpiresIn time.Duration `json:"expires_in"`
}

// Record reads the outcome recorded for order orderID on sku. ErrUnknownOrder when there is none.
func (s *Store) Record(ctx context.Context, orderID, sku string) (Record, error) {
	rec := Record{OrderID: orderID, SKU: sku}
	if err := errors.Join(order.ValidateOrderID(orderID), order.ValidateSKU(sku)); err != nil {
		return rec, err
	}
	key := OrderKey(sku, orderID)
	raw, err := getRecordScript.Run(ctx, s.rdb, []string{key}).Text()
	switch {
	case errors.Is(err, redis.Nil):
		return rec, fmt.Errorf("%w: no order %q is recorded for sku %q", ErrUnknownOrder, orderID, sku)
	case err != nil:
		return rec, fmt.Errorf("inventory: read %s: %w", orderSubject(orderID, sku), err)
	}
	var fields struct {
		Record
		Anchor string `json:"anchor"`
	}
	if err := json.Unmarshal([]byte(raw), &fields); err != nil {
		return rec, fmt.Errorf("%w: the record of %s: %v", ErrCorrupt, orderSubject(orderID, sku), err)
	}
	fields.OrderID, fields.SKU = orderID, sku
	rec = fields.Record
	if fields.Anchor != "" && fields.Anchor != sku {
		if lines, err := s.Lines(ctx, orderID, fields.Anchor); err == nil {
			rec.Lines = lines
		}
	}
	if c, ok := s.rdb.(redis.Cmdable); ok {
		if ttl, err := c.PTTL(ctx, key).Result(); err == nil && ttl > 0 {
			rec.ExpiresIn = ttl
		}
	}
	return rec, nil
}
