package stockctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/order"
)

// orderReport is what happened to one order, as recorded on one of its SKUs.
type orderReport struct {
	inventory.Record
	// ExpiresIn hides the record's expires_in, in nanoseconds: stockctl's durations are milliseconds.
	ExpiresIn   *struct{} `json:"expires_in,omitempty"`
	ExpiresInMS int64     `json:"expires_in_ms"`
}

func (r orderReport) writeText(w io.Writer) {
	fmt.Fprintf(w, "order %s on %s: %s", r.OrderID, r.SKU, r.Status)
	if r.Reason != "" {
		fmt.Fprintf(w, " (%s)", r.Reason)
	}
	if r.Early {
		fmt.Fprint(w, ", cancelled before it came")
	}
	fmt.Fprintf(w, "\nquantity %d, fence %d", r.Quantity, r.Fence)
	if len(r.Lines) > 0 {
		lines := make([]string, len(r.Lines))
		for i, l := range r.Lines {
			lines[i] = fmt.Sprintf("%s x%d", l.SKU, l.Quantity)
		}
		fmt.Fprintf(w, ", lines %s", strings.Join(lines, ", "))
	}
	if r.Record.ExpiresIn > 0 {
		fmt.Fprintf(w, "\nrecord kept %s more (OUTCOME_TTL from its last write)", r.Record.ExpiresIn.Round(time.Second))
	}
	fmt.Fprintln(w)
}

// runOrder prints the outcome recorded for an order: stockctl order ORDER_ID --sku SKU.
func runOrder(ctx context.Context, a *app, args []string) (report, error) {
	if len(args) != 1 {
		return nil, usageError(fmt.Sprintf("order wants one ORDER_ID, got %d argument(s)", len(args)))
	}
	if a.opts.sku == "" {
		return nil, usageError("order wants --sku SKU: records are kept per SKU (any SKU of the order)")
	}
	rec, err := a.store.Record(ctx, args[0], a.opts.sku)
	switch {
	case errors.Is(err, order.ErrInvalid):
		return nil, usageError(err.Error())
	case errors.Is(err, inventory.ErrUnknownOrder):
		return nil, notFound(fmt.Sprintf("no order %q is recorded for SKU %q (never decided, or its record expired after OUTCOME_TTL)", args[0], a.opts.sku))
	case err != nil:
		return nil, err
	}
	return orderReport{Record: rec, ExpiresInMS: millis(rec.ExpiresIn)}, nil
}
