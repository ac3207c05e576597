package inventory

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/stock"
)

// ElideLock as ReserveBatch's fence takes the SKU's lock inside the script (lock elision: Rajwar and
// Goodman, "Speculative Lock Elision", MICRO 2001, done here by the server rather than the hardware):
// when nobody holds the lock, the script decides the batch under a token above every token that wrote and
// every token the lock's fencing counter issued (the stored fence, when an elided batch raised it and
// nothing happened since; reserve_batch.lua's elided); the lock is held, as far as anyone can tell, for the
// duration of the script, which runs alone on the server. When the lock is held the batch fails with
// ErrLocked and writes nothing. Needs WithLockElision.
const ElideLock int64 = -1

// MaxBatch is the most orders one ReserveBatch takes: 64. The batch is one script call, and Redis runs
// nothing else while a script runs, so an unbounded batch would stall every other client of the server.
const MaxBatch = 64

var (
	//go:embed reserve_batch.lua
	reserveBatchSrc    string
	reserveBatchScript = stockScript(reserveBatchSrc)
)

// ReserveBatch decides 1..MaxBatch orders of one SKU in one script call (flat combining: one round trip
// and one stock update for the batch). The outcomes, in the order of orders, and what Redis holds after
// are those of calling Reserve for each order in turn with fence: every order gets its own recorded
// outcome, a recorded one (also an order id that came earlier in the batch) is replayed, and a rejection
// is an Outcome. The fence and stock checks run once for the batch: an error fails it all and writes
// nothing. A batch whose orders all have a recorded outcome is replayed unchecked, as Reserve would be.
// With fence ElideLock the batch takes the lock itself (see ElideLock); each Outcome's Fence is the token
// it drew.
//
// Invalid input fails with order.ErrInvalid, naming the order, before anything is sent: an order Reserve would
// refuse, orders of more than one SKU, or no or more than MaxBatch orders. Other errors are Reserve's.
func (s *Store) ReserveBatch(ctx context.Context, orders []Order, fence int64) ([]Outcome, error) {
	if err := s.validateBatch(orders, fence); err != nil {
		return nil, err
	}
	ctx, span := startBatch(ctx, orders, fence)
	outs, err := batchOutcomes(orders, fence, s.eval(ctx, reserveBatchScript, s.batchKeys(orders, fence), s.batchArgs(orders, fence)...))
	return endBatch(ctx, span, outs, err)
}

// Batch is one batch of ReserveBatches: orders of one SKU under one fence (what ReserveBatch takes), or
// one basket (what ReserveLines takes), and the context of its trace.
type Batch struct {
	Ctx    context.Context
	Orders []Order
	Fence  int64
	// Basket, instead of Orders and Fence: an order of several lines.
	Basket *Basket
}

// Basket is an order of several lines in ReserveBatches: what ReserveLines takes.
type Basket struct {
	OrderID string
	Lines   []order.Line
	Fences  Fences
}

// BatchResult is what ReserveBatch returns for one Batch (Outcomes), or ReserveLines for one basket (Order).
type BatchResult struct {
	Outcomes []Outcome
	Order    OrderOutcome
	Err      error
}

// ReserveBatches decides batches, of different SKUs, as ReserveBatch decides each (ReserveLines a basket),
// with their script calls in one pipeline (one batch too): one round trip (per node of a cluster) for all of
// them (group commit). Each batch succeeds or fails on its own, as alone; ctx bounds the round trip, a
// batch's Ctx only its span (a batch decided alone, below, is not cancelled with it either). With
// WithReplicaAcks, whose WAIT must follow each write on its connection, or on a client without pipelines,
// the batches are decided one after the other; a basket the store reserves line by line (a cluster) is
// decided alone after the others.
func (s *Store) ReserveBatches(ctx context.Context, batches []Batch) []BatchResult {
	results := make([]BatchResult, len(batches))
	p, pipelined := s.pipelined()
	if !pipelined {
		for i, b := range batches {
			results[i] = s.reserveAlone(b)
		}
		return results
	}
	pipe := p.Pipeline()
	calls := make([]pipedCall, len(batches))
	for i, b := range batches {
		calls[i], results[i].Err = s.queueBatch(ctx, pipe, b)
	}
	_, _ = pipe.Exec(ctx) // each batch's error is its own
	for i, b := range batches {
		if results[i].Err == nil {
			results[i] = s.pipedResult(b, calls[i])
		}
	}
	return results
}

// pipedCall is a batch's script call in a ReserveBatches pipeline; cmd nil: none was queued (a basket the
// store reserves line by line).
type pipedCall struct {
	cmd    *redis.Cmd
	basket basket // a basket's, checked
	// The span of a batch of orders (startBatch), from its call's queueing to its reply, and its context.
	ctx  context.Context
	span trace.Span
}

// queueBatch checks b and queues its script call on pipe.
func (s *Store) queueBatch(ctx context.Context, pipe redis.Pipeliner, b Batch) (pipedCall, error) {
	if b.Basket == nil {
		if err := s.validateBatch(b.Orders, b.Fence); err != nil {
			return pipedCall{}, err
		}
		sctx, span := startBatch(b.Ctx, b.Orders, b.Fence)
		cmd := pipe.EvalSha(ctx, reserveBatchScript.Hash(), s.batchKeys(b.Orders, b.Fence), s.batchArgs(b.Orders, b.Fence)...)
		return pipedCall{cmd: cmd, ctx: sctx, span: span}, nil
	}
	if s.lineByLine() {
		return pipedCall{}, nil
	}
	bk := basket{b.Basket.OrderID, b.Basket.Lines, b.Basket.Fences}
	if err := s.checkLines(&bk, s.minFence); err != nil {
		return pipedCall{}, err
	}
	keys, args := s.reserveLinesCall(bk)
	return pipedCall{cmd: pipe.EvalSha(ctx, reserveLinesScript.Hash(), keys, args...), basket: bk}, nil
}

// pipedResult reads b's result from its call in the pipeline, or decides it alone when no call was queued
// or the call could not run: NOSCRIPT (Redis restarted, or a node never ran it) or a slot move (the
// pipeline retries none).
func (s *Store) pipedResult(b Batch, call pipedCall) (r BatchResult) {
	if call.cmd == nil {
		return s.reserveAlone(b)
	}
	if err := call.cmd.Err(); err != nil && (redis.HasErrorPrefix(err, "NOSCRIPT") || slotMoving(err)) {
		if call.span != nil {
			call.span.End() // the batch is decided again alone, under a span of its own
		}
		return s.reserveAlone(b)
	}
	if b.Basket != nil {
		r.Order, r.Err = traceLines(b.Ctx, b.Basket.OrderID, func(ctx context.Context) ([]Outcome, error) {
			reply, err := call.cmd.Slice()
			return s.linesReply(ctx, call.basket, reply, err)
		})
		return r
	}
	outs, err := batchOutcomes(b.Orders, b.Fence, call.cmd)
	r.Outcomes, r.Err = endBatch(call.ctx, call.span, outs, err)
	return r
}

// BatchesBaskets reports whether ReserveBatches reserves a basket in its pipeline with the other batches:
// on one Redis, without WithReplicaAcks (whose WAITs decide the batches one after the other).
func (s *Store) BatchesBaskets() bool {
	_, pipelined := s.pipelined()
	return pipelined && !s.lineByLine()
}

// pipelined returns the client's pipelines, and whether ReserveBatches sends its batches in one: not with
// WithReplicaAcks, whose WAIT must follow each write on its connection, nor on a client without pipelines.
func (s *Store) pipelined() (interface{ Pipeline() redis.Pipeliner }, bool) {
	p, ok := s.rdb.(interface{ Pipeline() redis.Pipeliner })
	return p, ok && s.replicaAcks == 0
}

// reserveAlone decides b on its own: ReserveBatch, or ReserveLines for a basket.
func (s *Store) reserveAlone(b Batch) (r BatchResult) {
	// Not cancelled with b.Ctx, as the pipeline is not: the batch is sent and judged by its fence (b.Ctx of
	// a lock's section ends when its lease is lost), whichever way it goes.
	ctx := context.WithoutCancel(b.Ctx)
	if b.Basket != nil {
		r.Order, r.Err = s.ReserveLines(ctx, b.Basket.OrderID, b.Basket.Lines, b.Basket.Fences)
	} else {
		r.Outcomes, r.Err = s.ReserveBatch(ctx, b.Orders, b.Fence)
	}
	return r
}

// batchOutcomes reads the reply of reserve_batch.lua for orders.
func batchOutcomes(orders []Order, fence int64, cmd *redis.Cmd) ([]Outcome, error) {
	reply, err := cmd.Text()
	if err != nil {
		return nil, scriptError(fmt.Sprintf("reserve %d orders of", len(orders)), "", orders[0].SKU, fence, err)
	}
	return decodeOutcomes(orders, reply)
}

// validateBatch checks a batch as Reserve checks each of its orders, and that they share one SKU.
func (s *Store) validateBatch(orders []Order, fence int64) error {
	if err := checkRange("batch size", int64(len(orders)), 1, MaxBatch); err != nil {
		return err
	}
	sku := orders[0].SKU
	for i, o := range orders {
		if err := order.ValidateOrder(o.ID, o.SKU, o.Quantity); err != nil {
			return fmt.Errorf("%w (batch order %d, id %s)", err, i, quote(o.ID))
		}
		if o.SKU != sku {
			return fmt.Errorf("%w sku %s of batch order %d, id %s: want %s, the sku of the batch's first order",
				order.ErrInvalid, quote(o.SKU), i, quote(o.ID), quote(sku))
		}
	}
	return checkRange("fence", fence, s.minFence, stock.MaxStock)
}

// batchKeys are the keys of reserve_batch.lua: the stock, the lock's fencing counter when the store
// compares with it, the lock when the batch takes it itself, then the outcome record of each order.
func (s *Store) batchKeys(orders []Order, fence int64) []string {
	sku := orders[0].SKU
	keys := make([]string, 0, len(orders)+2)
	keys = append(keys, stock.Key(sku))
	if s.fenceCounter != nil {
		keys = append(keys, s.fenceCounter(sku))
	}
	if fence == ElideLock {
		keys = append(keys, s.lock(sku))
	}
	for _, o := range orders {
		keys = append(keys, OrderKey(sku, o.ID))
	}
	return keys
}

// batchArgs are the arguments of reserve_batch.lua: the fence, the outcome TTL, whether a replay writes,
// the fencing counter's TTL, then each quantity.
func (s *Store) batchArgs(orders []Order, fence int64) []any {
	args := make([]any, 0, len(orders)+4)
	args = append(args, fence, s.ttlMillis, s.replayWrites(), s.counterTTL)
	for _, o := range orders {
		args = append(args, o.Quantity)
	}
	return args
}

// decodeOutcomes reads the reply of reserve_batch.lua: a line per order, its replayed mark ("0" or "1")
// and its outcome record.
func decodeOutcomes(orders []Order, reply string) ([]Outcome, error) {
	lines := strings.Split(reply, "\n")
	if len(lines) != len(orders) {
		return nil, fmt.Errorf("inventory: unexpected script reply %.200q for a batch of %d orders", reply, len(orders))
	}
	outs := make([]Outcome, len(orders))
	for i, o := range orders {
		line := lines[i]
		if line == "" || line[0] != '0' && line[0] != '1' {
			return nil, fmt.Errorf("inventory: unexpected script reply %.200q for order %q", line, o.ID)
		}
		replayed := line[0] == '1'
		rec, ok := parseRecord(line[1:])
		switch {
		case !ok && replayed: // a stored record the script replayed as it found it
			return nil, fmt.Errorf("%w: the outcome record of %s is not one: %.200q", ErrCorrupt, orderSubject(o.ID, o.SKU), line[1:])
		case !ok:
			return nil, fmt.Errorf("inventory: unexpected script reply %.200q for order %q", line, o.ID)
		}
		outs[i] = Outcome{OrderID: o.ID, SKU: o.SKU, Replayed: replayed, Status: rec.Status, Reason: rec.Reason,
			Quantity: rec.Quantity, AvailableAfter: rec.AvailableAfter, Fence: rec.Fence}
	}
	return outs, nil
}

// outcomeRecord is what an order's outcome record says of its decision.
type outcomeRecord struct {
	Status         order.Status `json:"status"`
	Reason         order.Reason `json:"reason"`
	Quantity       int64        `json:"quantity"`
	AvailableAfter int64        `json:"available_after"`
	Fence          int64        `json:"fence"`
}

// parseRecord reads an outcome record: the way the scripts write a fresh one
// ({"status":"..","reason":"..","quantity":N,"available_after":N,"fence":N}) without encoding/json, any other
// (a replayed record that a later event rewrote, say) with it. ok is false for one that is not a JSON object
// or has no status.
func parseRecord(s string) (rec outcomeRecord, ok bool) {
	p := recordScan{s: s, ok: true}
	p.lit(`{"status":"`)
	rec.Status = order.Status(p.str())
	p.lit(`,"reason":"`)
	rec.Reason = order.Reason(p.str())
	p.lit(`,"quantity":`)
	rec.Quantity = p.int()
	p.lit(`,"available_after":`)
	rec.AvailableAfter = p.int()
	p.lit(`,"fence":`)
	rec.Fence = p.int()
	p.lit("}")
	if !p.ok || p.s != "" {
		rec = outcomeRecord{}
		if json.Unmarshal([]byte(s), &rec) != nil {
			return rec, false
		}
	}
	return rec, rec.Status != ""
}

// recordScan reads a record written the scripts' way; ok turns false at the first difference.
type recordScan struct {
	s  string
	ok bool
}

func (p *recordScan) lit(want string) {
	if p.ok = p.ok && strings.HasPrefix(p.s, want); p.ok {
		p.s = p.s[len(want):]
	}
}

// str reads a string up to its closing quote (the scripts write no escapes), which it consumes; a status or
// reason of the package's is returned as its constant, another copied, so that neither keeps the reply.
func (p *recordScan) str() string {
	i := strings.IndexByte(p.s, '"')
	if p.ok = p.ok && i >= 0 && plain(p.s[:i]); !p.ok {
		return ""
	}
	v := p.s[:i]
	p.s = p.s[i+1:]
	switch v {
	case "":
		return ""
	case string(order.StatusReserved):
		return string(order.StatusReserved)
	case string(order.StatusRejected):
		return string(order.StatusRejected)
	case string(order.ReasonInsufficientStock):
		return string(order.ReasonInsufficientStock)
	case string(order.ReasonUnknownSKU):
		return string(order.ReasonUnknownSKU)
	}
	return strings.Clone(v)
}

// plain reports whether encoding/json reads s, inside quotes, as it is: printable ASCII, no backslash.
func plain(s string) bool {
	for i := range len(s) {
		if s[i] < 0x20 || s[i] > 0x7e || s[i] == '\\' {
			return false
		}
	}
	return true
}

// int reads a decimal integer.
func (p *recordScan) int() int64 {
	if !p.ok {
		return 0
	}
	i := 0
	for i < len(p.s) && (p.s[i] == '-' || p.s[i] >= '0' && p.s[i] <= '9') {
		i++
	}
	digits := strings.TrimPrefix(p.s[:i], "-")
	v, err := strconv.ParseInt(p.s[:i], 10, 64)
	p.ok, p.s = err == nil && (len(digits) == 1 || digits[0] != '0'), p.s[i:] // JSON has no leading zeros
	return v
}
