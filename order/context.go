package order

import "context"

type contextKey struct{}

// NewContext returns ctx carrying o, the decoded order of the message being handled (the worker's decode
// step puts it there once; the steps after it read it with FromContext).
func NewContext(ctx context.Context, o Order) context.Context {
	return context.WithValue(ctx, contextKey{}, o)
}

// FromContext returns the order NewContext put in ctx.
func FromContext(ctx context.Context) (Order, bool) {
	o, ok := ctx.Value(contextKey{}).(Order)
	return o, ok
}
