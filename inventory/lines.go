package inventory

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/stock"
)

var (
	//go:embed reserve_lines.lua
	reserveLinesSrc    string
	reserveLinesScript = stockScript(reserveLinesSrc)

	//go:embed transition.lua
	transitionSrc    string
	transitionScript = stockScript(transitionSrc)

	//go:embed cancel_early.lua
	cancelEarlySrc    string
	cancelEarlyScript = redis.NewScript(cancelEarlySrc)

	//go:embed get_record.lua
	getRecordSrc    string
	getRecordScript = redis.NewScript(getRecordSrc)

	//go:embed outlives.lua
	outlivesSrc    string
	outlivesScript = redis.NewScript(outlivesSrc)

	//go:embed check_line.lua
	checkLineSrc    string
	checkLineScript = redis.NewScript(checkLineSrc)
)

// OrderOutcome is the decision recorded for an order with lines, or for a lifecycle event (Cancel,
// Fulfil) of any order.
type OrderOutcome struct {
	OrderID string
	// Status: reserved when every line is; rejected when the basket or the event was refused; cancelled or
	// fulfilled when every line is.
	Status order.Status
	Reason order.Reason
	// SKU is the line that decided a rejection ("" otherwise).
	SKU string
	// Lines are the lines' outcomes, sorted by SKU; a lifecycle event refused as a whole has none.
	Lines []Outcome
	// Replayed: every line was decided by an earlier call, or the event changed nothing.
	Replayed bool
}

// Fences are the fencing tokens of a call's SKUs, by SKU; a nil map is unfenced (token 0 everywhere).
type Fences map[string]int64

// basket is the order a call is about: its id, its lines (sorted by SKU) and their fences.
type basket struct {
	id     string
	lines  []order.Line
	fences Fences
}

// elided: the call takes its lines' locks itself (ElideLock on its first line, so on all: checkLines).
func (b basket) elided() bool { return len(b.lines) > 0 && b.fences[b.lines[0].SKU] == ElideLock }

// ReserveLines reserves every line of an order or none (lines in any order: it merges and sorts them as
// MergeLines, whose errors it returns). On one Redis it
// is one script; through a *redis.ClusterClient the lines' keys are in different slots, so it is a saga:
// line by line in SKU order, and when a line is short the lines reserved before it are given back. Every
// line gets its own outcome record. A call after a crash at any point of the saga (the message's
// redelivery) finishes it: recorded lines are replayed, so the outcome and the stock come out as if the
// first call had run to the end. A rejected basket names the line that rejected it (SKU, Reason); its
// other lines are rejected with ReasonOtherLine.
//
// The caller holds the locks of all the lines' SKUs (fences: their tokens), as for Reserve. Errors are
// Reserve's: an error of the one-Redis script writes nothing; one in the middle of a saga leaves it for
// the next call to finish.
//
// With WithLockElision the fence of every line may be ElideLock instead: the script then takes the lines'
// locks itself, as ReserveBatch does, when none of them is held. ErrLocked, with nothing written, says
// that one is held, or that the basket cannot be decided in one script (a cluster, a saga begun, a cancel
// that came first): take the locks and call again with their tokens.
func (s *Store) ReserveLines(ctx context.Context, orderID string, lines []order.Line, fences Fences) (OrderOutcome, error) {
	b := basket{orderID, lines, fences}
	if err := s.checkLines(&b, s.minFence); err != nil {
		return OrderOutcome{}, err
	}
	return traceLines(ctx, b.id, func(ctx context.Context) ([]Outcome, error) { return s.reserveLines(ctx, b) })
}

// traceLines runs reserve inside a SpanReserveLines span (traceOrder) and summarizes the lines' outcomes.
func traceLines(ctx context.Context, orderID string, reserve func(context.Context) ([]Outcome, error)) (OrderOutcome, error) {
	return traceOrder(ctx, SpanReserveLines, orderID, func(ctx context.Context) (OrderOutcome, error) {
		outs, err := reserve(ctx)
		if err != nil {
			return OrderOutcome{}, err
		}
		return summarize(orderID, outs), nil
	})
}

// reserveLines runs reserve_lines.lua, or the saga when the store goes line by line or the script finds a
// saga begun.
func (s *Store) reserveLines(ctx context.Context, b basket) ([]Outcome, error) {
	elided := b.elided()
	if s.lineByLine() && elided {
		return nil, fmt.Errorf("%w: order %q is reserved line by line, under its locks", ErrLocked, b.id)
	}
	if s.lineByLine() {
		return s.reserveSaga(ctx, b)
	}
	keys, args := s.reserveLinesCall(b)
	reply, err := s.eval(ctx, reserveLinesScript, keys, args...).Slice()
	return s.linesReply(ctx, b, reply, err)
}

// reserveLinesCall are the keys and arguments of reserve_lines.lua for b.
func (s *Store) reserveLinesCall(b basket) (keys []string, args []any) {
	keys, lineArgs := s.linesCall(b)
	return keys, append([]any{s.ttlMillis, s.replayWrites(), s.counterTTL}, lineArgs...)
}

// linesReply reads reserve_lines.lua's reply for b (or its error): the lines' outcomes, or the saga or
// the cancel that the script found due.
func (s *Store) linesReply(ctx context.Context, b basket, reply []any, err error) ([]Outcome, error) {
	elided := b.elided()
	switch {
	case err == nil:
		return decodeLineOutcomes(b, reply)
	case elided && (redis.HasErrorPrefix(err, "PARTIAL") || redis.HasErrorPrefix(err, "EARLYCANCEL")):
		return nil, fmt.Errorf("%w: order %q is finished under its locks (%v)", ErrLocked, b.id, err)
	case redis.HasErrorPrefix(err, "PARTIAL"):
		return s.reserveSaga(ctx, b)
	case redis.HasErrorPrefix(err, "EARLYCANCEL"):
		return s.transitionAll(ctx, "cancel", b)
	}
	return nil, scriptError("reserve the lines of", b.id, b.lines[0].SKU, b.fences[b.lines[0].SKU], err)
}

// reserveSaga reserves lines one at a time (reserve.lua), up to the first line rejected on its own or
// cancelled, then gives back the lines reserved before it.
func (s *Store) reserveSaga(ctx context.Context, b basket) ([]Outcome, error) {
	early, err := s.checkStocks(ctx, b)
	if err != nil {
		return nil, err
	}
	if early {
		return s.transitionAll(ctx, "cancel", b)
	}
	outs := make([]Outcome, 0, len(b.lines))
	for i, l := range b.lines {
		reply, err := s.eval(ctx, reserveScript, s.keys(l.SKU, b.id), l.Quantity, b.fences[l.SKU], s.ttlMillis,
			s.replayWrites(), recordMembers(b.lines, i)).Slice()
		if err != nil {
			return nil, scriptError("reserve", b.id, l.SKU, b.fences[l.SKU], err)
		}
		out, err := decodeOutcome(b.id, l.SKU, reply)
		if err != nil {
			return nil, err
		}
		outs = append(outs, out)
		if err := s.afterLine(i); err != nil {
			return nil, err
		}
		if stopsSaga(out) {
			return s.undoSaga(ctx, b, outs)
		}
	}
	return outs, nil
}

// checkStocks reads the stock hash and the record of every line before a line-by-line run writes its
// first line, so that broken data (ErrCorrupt) fails the order before anything is written rather than
// after its first lines, as the one-Redis scripts, which check every line before their first write, do.
// early reports that a cancel of the order came before it (cancelEarly) and left its record on a line: the
// basket follows it, cancelled whole. A read per line.
func (s *Store) checkStocks(ctx context.Context, b basket) (early bool, err error) {
	var earlies int64
	for _, l := range b.lines {
		reply, err := checkLineScript.Run(ctx, s.rdb, []string{stock.Key(l.SKU), OrderKey(l.SKU, b.id)}).Slice()
		if err != nil {
			return false, scriptError("check the stock of", b.id, l.SKU, 0, err)
		}
		if field, v := badField(reply); field != "" {
			return false, fmt.Errorf("%w: order %q: sku %q: stock field %s is not an integer HINCRBY can add to: %s",
				ErrCorrupt, b.id, l.SKU, field, quote(v))
		}
		n, _ := reply[3].(int64)
		earlies += n
	}
	return earlies > 0, nil
}

// badField returns the first field of a checkLineScript reply that the scripts' increments would fail on,
// and its value; "" when there is none.
func badField(reply []any) (field, value string) {
	for i, name := range []string{"available", "reserved", "fulfilled"} {
		if v, ok := reply[i].(string); ok && !incrementable(v) {
			return name, v
		}
	}
	return "", ""
}

// canonicalInt is an integer as Redis writes it: no sign but a minus, no leading zero, at most 19 digits.
var canonicalInt = regexp.MustCompile(`^(0|-?[1-9][0-9]{0,18})$`)

// incrementable is the scripts' int(): an integer as Redis writes it, far from the int64 limits.
func incrementable(v string) bool {
	f, _ := strconv.ParseFloat(v, 64)
	return canonicalInt.MatchString(v) && math.Abs(f) < 4e18
}

// stopsSaga: a line whose outcome decides the basket is not reserved: rejected on its own, or cancelled
// (a cancel came while a crash had left the basket half reserved).
func stopsSaga(out Outcome) bool {
	return out.Status == order.StatusCancelled || out.Status == order.StatusRejected && out.Reason != order.ReasonOtherLine
}

// undoSaga gives back the reserved lines of outs (the lines up to the one that stopped the saga) and
// decides the lines after it (restOfSaga).
func (s *Store) undoSaga(ctx context.Context, b basket, outs []Outcome) ([]Outcome, error) {
	last := outs[len(outs)-1]
	for i, out := range outs {
		if out.Status != order.StatusReserved {
			continue
		}
		undone, err := s.transition(ctx, "abort", b, i)
		if err != nil {
			return nil, err
		}
		outs[i] = undone[0]
	}
	for i := len(outs); i < len(b.lines); i++ {
		rest, err := s.restOfSaga(ctx, b, i, last)
		if err != nil {
			return nil, err
		}
		outs = append(outs, rest)
	}
	return outs, nil
}

// restOfSaga decides line i of a basket whose saga stopped at an earlier line, last: cancelled with it (a
// cancel wrote every line's record, which this replays), or else rejected with it, recorded so that a
// cancel naming that line finds the order rejected rather than unknown.
func (s *Store) restOfSaga(ctx context.Context, b basket, i int, last Outcome) (Outcome, error) {
	op := cmp.Or(map[order.Status]string{order.StatusCancelled: "cancel"}[last.Status], "abort")
	outs, err := s.transition(ctx, op, b, i)
	if err != nil {
		return Outcome{}, err
	}
	return outs[0], nil
}

// Lines returns the lines of the order orderID that has a record for sku (any one of its SKUs), sorted
// by SKU: a basket's lines, or a single-SKU order's one line. No record fails with ErrUnknownOrder.
func (s *Store) Lines(ctx context.Context, orderID, sku string) ([]order.Line, error) {
	lines, _, err := s.linesOf(ctx, orderID, sku)
	return lines, err
}

// linesOf is Lines, and the records it read on the way, by SKU (for records, which need not read them
// again).
func (s *Store) linesOf(ctx context.Context, orderID, sku string) ([]order.Line, map[string]lineRecord, error) {
	if err := cmp.Or(order.ValidateOrderID(orderID), order.ValidateSKU(sku)); err != nil {
		return nil, nil, err
	}
	rec, err := s.record(ctx, orderID, sku)
	if err != nil {
		return nil, nil, err
	}
	read := map[string]lineRecord{sku: rec}
	switch {
	case rec.Early: // a cancel that came before the order (cancelEarly): the order is not known yet
		return nil, nil, fmt.Errorf("%w: order %q was %w (sku %q)", ErrUnknownOrder, orderID, errCancelledEarly, sku)
	case rec.Lines != nil: // the basket's least SKU
		return rec.Lines, read, nil
	case rec.Anchor == "": // a single-SKU order
		return []order.Line{{SKU: sku, Quantity: rec.Quantity}}, read, nil
	}
	anchor, err := s.record(ctx, orderID, rec.Anchor)
	if err == nil && !slices.ContainsFunc(anchor.Lines, func(l order.Line) bool { return l.SKU == sku }) {
		err = fmt.Errorf("%w: the record of order %q for sku %q does not list sku %q among its lines", ErrCorrupt,
			orderID, rec.Anchor, sku)
	}
	read[rec.Anchor] = anchor
	return anchor.Lines, read, err
}

// ErrUnknownOrder: no outcome is recorded for the order and SKU (never decided, or expired).
var ErrUnknownOrder = errors.New("inventory: unknown order")

// errCancelledEarly comes with Lines' ErrUnknownOrder when the SKU's record is that of a cancel that came
// before the order (cancelEarly): the order is cancelled, whether or not it came since.
var errCancelledEarly = errors.New("cancelled before it came")

// lineRecord is what Lines and the lifecycle's refusals read of an outcome record.
type lineRecord struct {
	Status   order.Status `json:"status"`
	Early    bool         `json:"early"` // written by a cancel that came before the order (cancelEarly)
	Quantity int64        `json:"quantity"`
	Lines    []order.Line `json:"lines"`  // on a basket's first SKU
	Anchor   string       `json:"anchor"` // on its other SKUs: the first
}

func (s *Store) record(ctx context.Context, orderID, sku string) (lineRecord, error) {
	var rec lineRecord
	raw, err := getRecordScript.Run(ctx, s.rdb, []string{OrderKey(sku, orderID)}).Text()
	switch {
	case errors.Is(err, redis.Nil):
		return rec, fmt.Errorf("%w: no order %q is recorded for sku %q", ErrUnknownOrder, orderID, sku)
	case err != nil:
		return rec, fmt.Errorf("inventory: read %s: %w", orderSubject(orderID, sku), err)
	}
	if err := json.Unmarshal([]byte(raw), &rec); err != nil {
		return rec, fmt.Errorf("%w: the record of %s: %v", ErrCorrupt, orderSubject(orderID, sku), err)
	}
	return rec, nil
}

// Cancel gives back the stock of every line of the order orderID that has a record for sku (any one of its
// SKUs), once: the order becomes cancelled. A cancelled order replays as cancelled; a rejected or fulfilled
// one is refused with a rejected outcome (ReasonNotReserved, ReasonAlreadyFulfilled) that writes nothing.
// An order with no record for sku is cancelled early (ReasonCancelledEarly, cancelEarly): the record it
// leaves makes the order, when it comes, reserve nothing. A basket left half reserved by a crash is
// cancelled whole: its lines without a record get a cancelled one, so its redelivery replays the
// cancellation.
//
// The caller holds the locks of all the order's SKUs (Lines tells them) and passes their tokens; a SKU of
// the order missing from a non-nil fences fails with ErrNotLocked. On one Redis it is one script; on a
// cluster one per line, in SKU order, and a call after a crash finishes what an earlier one began.
func (s *Store) Cancel(ctx context.Context, orderID, sku string, fences Fences) (OrderOutcome, error) {
	return traceOrder(ctx, SpanCancel, orderID, func(ctx context.Context) (OrderOutcome, error) {
		return s.lifecycle(ctx, "cancel", orderID, sku, fences)
	})
}

// Fulfil moves every line of a reserved order out of reserved for good (into the stock's fulfilled
// field), once, as Cancel gives it back: a fulfilled order replays as fulfilled; an unknown, rejected or
// cancelled one is refused (ReasonUnknownOrder, ReasonNotReserved, ReasonAlreadyCancelled), also one whose
// cancel came before it (ReasonAlreadyCancelled, whether the order came since or not). A basket left
// half reserved by a crash is first reserved to the end, as its redelivery would (ReserveLines), then
// fulfilled or refused: its reservation may never come back (poisoned after MAX_ATTEMPTS crashes), and a
// fulfil waiting for it would wait for ever.
func (s *Store) Fulfil(ctx context.Context, orderID, sku string, fences Fences) (OrderOutcome, error) {
	return traceOrder(ctx, SpanFulfil, orderID, func(ctx context.Context) (OrderOutcome, error) {
		return s.lifecycle(ctx, "fulfil", orderID, sku, fences)
	})
}

// lifecycle runs op (cancel or fulfil) on the order's lines after deciding from their records whether
// it applies.
func (s *Store) lifecycle(ctx context.Context, op, orderID, sku string, fences Fences) (OrderOutcome, error) {
	lines, read, err := s.linesOf(ctx, orderID, sku)
	switch {
	case errors.Is(err, ErrUnknownOrder) && op == "cancel":
		return s.cancelEarly(ctx, orderID, sku, fences)
	case errors.Is(err, errCancelledEarly): // a fulfil of an order cancelled before it came
		return refused(orderID, sku, order.ReasonAlreadyCancelled), nil
	case errors.Is(err, ErrUnknownOrder):
		return refused(orderID, sku, order.ReasonUnknownOrder), nil
	case err != nil:
		return OrderOutcome{}, err
	}
	b := basket{orderID, lines, fences}
	if err := s.checkLines(&b, 0); err != nil {
		return OrderOutcome{}, err
	}
	states, err := s.finishedStates(ctx, op, b, read)
	if err != nil {
		return OrderOutcome{}, err
	}
	if reason := refusal(op, states); reason != "" {
		return refused(orderID, sku, reason), nil
	}
	outs, err := s.transitionAll(ctx, op, b)
	if err != nil {
		return OrderOutcome{}, err
	}
	return summarize(orderID, outs), nil
}

// transitionAll runs op on every line: in one script, or line by line in SKU order.
func (s *Store) transitionAll(ctx context.Context, op string, b basket) ([]Outcome, error) {
	if !s.lineByLine() {
		return s.transition(ctx, op, b, -1)
	}
	if _, err := s.checkStocks(ctx, b); err != nil {
		return nil, err
	}
	var outs []Outcome
	for i := range b.lines {
		out, err := s.transition(ctx, op, b, i)
		if err != nil {
			return nil, err
		}
		outs = append(outs, out...)
	}
	return outs, nil
}

// cancelEarly remembers a cancel of an order that has no record for sku yet (its reservation comes after
// it in the stream, or never): a cancelled record marked early (cancel_early.lua), which the reservation
// then follows (reserve_batch.lua replays it; a basket is cancelled whole, reserving nothing). A second
// such cancel replays the first. A record that is not early means the order came meanwhile, which the
// lock on sku rules out unless the caller does not hold it: ErrNotLocked, to look again.
func (s *Store) cancelEarly(ctx context.Context, orderID, sku string, fences Fences) (OrderOutcome, error) {
	created, err := s.eval(ctx, cancelEarlyScript, []string{OrderKey(sku, orderID)}, s.ttlMillis, fences[sku]).Int64()
	if err != nil {
		return OrderOutcome{}, scriptError("cancel early", orderID, sku, fences[sku], err)
	}
	return OrderOutcome{OrderID: orderID, Status: order.StatusCancelled, Reason: order.ReasonCancelledEarly, SKU: sku,
		Replayed: created == 0}, nil
}

func refused(orderID, sku string, reason order.Reason) OrderOutcome {
	return OrderOutcome{OrderID: orderID, Status: order.StatusRejected, Reason: reason, SKU: sku}
}

// finishedStates reads the lines' recorded statuses ("" for none), after finishing the basket's reservation
// when a crash stopped it midway (sagaStopped), as its redelivery would: the reservation may never come
// back (poisoned after MAX_ATTEMPTS crashes), and op must neither wait for it nor leave the lines it
// reserved. read are records read already (linesOf), by SKU.
func (s *Store) finishedStates(ctx context.Context, op string, b basket, read map[string]lineRecord) ([]order.Status, error) {
	recs, err := s.records(ctx, b, read)
	if err == nil && sagaStopped(op, recs) && s.outlive(ctx, b, recs) {
		if _, err = s.reserveLines(ctx, b); err == nil {
			recs, err = s.records(ctx, b, nil)
		}
	}
	states := make([]order.Status, len(recs))
	for i, rec := range recs {
		states[i] = rec.Status
	}
	return states, err
}

// outlive reports whether the recorded lines' records are far from expiring (a minute, or a quarter of
// OUTCOME_TTL when that is shorter). The records are read one after the other: a stopped saga's lines
// without a record could otherwise be lines whose records expired between two reads, the earlier lines'
// about to follow. An error reads as no.
func (s *Store) outlive(ctx context.Context, b basket, recs []lineRecord) bool {
	margin := min(time.Minute.Milliseconds(), s.ttlMillis/4)
	for i, rec := range recs {
		if rec.Status != "" && !s.outlives(ctx, OrderKey(b.lines[i].SKU, b.id), margin) {
			return false
		}
	}
	return true
}

// outlives reports whether the record at key outlives margin milliseconds; an error reads as no.
func (s *Store) outlives(ctx context.Context, key string, margin int64) bool {
	ok, err := outlivesScript.Run(ctx, s.rdb, []string{key}, margin).Bool()
	return ok && err == nil
}

// sagaStopped reports whether the lines' records (in SKU order) are those of a reservation saga (a cluster
// reserves a basket line by line) that a crash stopped with a line reserved: lines reserved, or rejected
// while it gave them back, then lines without a record yet, and anywhere the record of a cancel that came
// before the order (cancelEarly), which the finished saga follows: it cancels the basket whole. It says no to
// anything else, where finishing could reserve a line a second time: a fulfilled, cancelled or released
// line, or a line without a record before one with, mean that records expired (OUTCOME_TTL; the earlier
// lines' first, unless a transition renewed them). A cancel of a basket only half reserved cancels it whole
// instead (its redelivery then reserves nothing).
func sagaStopped(op string, recs []lineRecord) bool {
	recs = slices.DeleteFunc(slices.Clone(recs), func(rec lineRecord) bool { return rec.Early })
	end := len(recs)
	for end > 0 && recs[end-1].Status == "" {
		end--
	}
	head := recs[:end] // the recorded lines, unless one without a record comes before a recorded one
	if slices.ContainsFunc(head, notOfASaga) || !slices.ContainsFunc(head, hasStatus(order.StatusReserved)) {
		return false
	}
	return slices.ContainsFunc(head, hasStatus(order.StatusRejected)) || (op == "fulfil" && end < len(recs))
}

// notOfASaga: no reservation saga leaves a line so (nor one without a record before a recorded one).
func notOfASaga(rec lineRecord) bool {
	return rec.Status != order.StatusReserved && rec.Status != order.StatusRejected
}

func hasStatus(st order.Status) func(lineRecord) bool {
	return func(rec lineRecord) bool { return rec.Status == st }
}

// refusal decides from the lines' statuses why op cannot apply, if it cannot: the reason of the first rule
// of op whose status a line has.
func refusal(op string, states []order.Status) order.Reason {
	for _, r := range refusals[op] {
		if slices.Contains(states, r.status) {
			return r.reason
		}
	}
	return ""
}

// refusals are the rules of each op, first match first. A fulfil that finds a line without a record once
// the reservation is finished finds a record expired (OUTCOME_TTL) while another line's was renewed.
var refusals = map[string][]struct {
	status order.Status
	reason order.Reason
}{
	"cancel": {{order.StatusRejected, order.ReasonNotReserved}, {order.StatusFulfilled, order.ReasonAlreadyFulfilled}},
	"fulfil": {{order.StatusRejected, order.ReasonNotReserved}, {order.StatusCancelled, order.ReasonAlreadyCancelled},
		{order.StatusReleased, order.ReasonAlreadyCancelled}, {"", order.ReasonUnknownOrder}},
}

// records reads the record of each line (a zero one when it has none), but for those in read (by SKU).
func (s *Store) records(ctx context.Context, b basket, read map[string]lineRecord) ([]lineRecord, error) {
	recs := make([]lineRecord, len(b.lines))
	for i, l := range b.lines {
		if rec, ok := read[l.SKU]; ok {
			recs[i] = rec
			continue
		}
		rec, err := s.record(ctx, b.id, l.SKU)
		if err != nil && !errors.Is(err, ErrUnknownOrder) {
			return nil, err
		}
		recs[i] = rec
	}
	return recs, nil
}

// transition runs transition.lua with op on line only of lines, or on all of them (only < 0).
func (s *Store) transition(ctx context.Context, op string, b basket, only int) ([]Outcome, error) {
	keys, args := s.linesCall(b)
	subset := b
	if only >= 0 {
		k := len(keys) / len(b.lines)
		keys, args, subset.lines = keys[k*only:k*(only+1)], args[3*only:3*(only+1)], b.lines[only:only+1]
	}
	reply, err := s.eval(ctx, transitionScript, keys, append([]any{op, s.replayWrites(), s.ttlMillis}, args...)...).Slice()
	if err != nil {
		sku := subset.lines[0].SKU
		return nil, scriptError(op, b.id, sku, b.fences[sku], err)
	}
	return decodeLineOutcomes(subset, reply)
}

// checkLines checks an order's id, lines and fences (each at least minFence; ElideLock on every line or
// none) before a call, and merges and sorts its lines (MergeLines).
func (s *Store) checkLines(b *basket, minFence int64) (err error) {
	if b.lines, err = order.MergeLines(b.lines); err != nil {
		return err
	}
	for _, l := range b.lines {
		if err := checkRange("fence of sku "+quote(l.SKU), b.fences[l.SKU], minFence, stock.MaxStock); err != nil {
			return err
		}
		if (b.fences[l.SKU] == ElideLock) != b.elided() {
			return fmt.Errorf("%w fences of order %q: ElideLock on some lines only", order.ErrInvalid, b.id)
		}
		if _, locked := b.fences[l.SKU]; b.fences != nil && !locked {
			return fmt.Errorf("%w: order %q has sku %q, which has no fence", ErrNotLocked, b.id, l.SKU)
		}
	}
	return order.ValidateOrderID(b.id)
}

// lineByLine: the store cannot run one script over keys of several slots (a cluster, or a test's
// afterLine hook that simulates a crash between lines).
func (s *Store) lineByLine() bool {
	_, one := s.rdb.(*redis.Client)
	return !one || s.crashAfterLine != nil
}

// afterLine runs the test hook after line i of a saga; an error stops the saga there, as a crash would.
func (s *Store) afterLine(i int) error {
	if s.crashAfterLine == nil {
		return nil
	}
	return s.crashAfterLine(i)
}

// linesCall are the keys (k per line: the lock's last when elided) and per-line arguments (quantity,
// fence, record members) of reserve_lines.lua and transition.lua.
func (s *Store) linesCall(b basket) (keys []string, args []any) {
	elided := b.elided()
	for i, l := range b.lines {
		keys = append(keys, s.keys(l.SKU, b.id)...)
		if elided {
			keys = append(keys, s.lock(l.SKU))
		}
		args = append(args, l.Quantity, b.fences[l.SKU], recordMembers(b.lines, i))
	}
	return keys, args
}

// recordMembers are what the record of line i of a basket adds to an outcome record: on the first SKU the
// order's lines, on the others the first SKU, so that Lines finds the whole order from any of its SKUs.
func recordMembers(lines []order.Line, i int) string {
	if i > 0 {
		return `,"anchor":"` + lines[0].SKU + `"` // SKUs need no escaping (ValidateSKU)
	}
	b, _ := json.Marshal(lines)
	return `,"lines":` + string(b)
}

// decodeLineOutcomes reads one decodeOutcome reply per line.
func decodeLineOutcomes(b basket, reply []any) ([]Outcome, error) {
	if len(reply) != len(b.lines) {
		return nil, fmt.Errorf("inventory: unexpected script reply %v for a basket of %d lines", reply, len(b.lines))
	}
	outs := make([]Outcome, len(b.lines))
	for i, l := range b.lines {
		fields, ok := reply[i].([]any)
		if !ok {
			return nil, fmt.Errorf("inventory: unexpected script reply %v for order %q", reply[i], b.id)
		}
		out, err := decodeOutcome(b.id, l.SKU, fields)
		if err != nil {
			return nil, err
		}
		outs[i] = out
	}
	return outs, nil
}

// summarize makes the order's outcome from its lines' outcomes: the most final of their statuses
// (rejected, then cancelled, then fulfilled, then reserved), the line that rejected it.
func summarize(orderID string, outs []Outcome) OrderOutcome {
	o := OrderOutcome{OrderID: orderID, Lines: outs,
		Replayed: !slices.ContainsFunc(outs, func(out Outcome) bool { return !out.Replayed })}
	o.Status = slices.MaxFunc(outs, func(a, b Outcome) int { return finality[a.Status] - finality[b.Status] }).Status
	if o.Status != order.StatusRejected {
		return o
	}
	o.Reason = order.ReasonOtherLine // a replay of a basket whose short line's record expired
	if i := slices.IndexFunc(outs, func(out Outcome) bool {
		return out.Status == order.StatusRejected && out.Reason != order.ReasonOtherLine
	}); i >= 0 {
		o.Reason, o.SKU = outs[i].Reason, outs[i].SKU
	}
	return o
}

// finality orders the statuses of an order's lines: the order's status is its lines' most final.
var finality = map[order.Status]int{order.StatusReserved: 0, order.StatusFulfilled: 1, order.StatusReleased: 2, order.StatusCancelled: 2, order.StatusRejected: 3}
