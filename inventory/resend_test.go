package inventory

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/stock"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// resendCase is one write whose reply a proxy drops once, so that go-redis sends it again.
type resendCase struct {
	name   string
	script string // the file of the script whose first reply is lost
	opts   []Option
	setup  func(ctx context.Context, s *Store, p string) error // p prefixes the case's SKUs
	call   func(ctx context.Context, s *Store, p string) (any, error)
}

// Internal test: it names each script by its file and loads it before the call, so that the reply lost is
// that of a send that ran (not a NOSCRIPT).
var scriptFiles = map[string]*redis.Script{
	"../stock/set.lua": stock.SetScript, "restock.lua": restockScript, "raise_fence.lua": raiseFenceScript,
	"reserve.lua": reserveScript, "reserve_batch.lua": reserveBatchScript, "reserve_lines.lua": reserveLinesScript,
	"release.lua": releaseScript, "transition.lua": transitionScript, "cancel_early.lua": cancelEarlyScript,
	"get_stock.lua": getStockScript, "get_record.lua": getRecordScript, "outlives.lua": outlivesScript,
	"check_line.lua": checkLineScript,
}

func stocked(skus ...string) func(context.Context, *Store, string) error {
	return func(ctx context.Context, s *Store, p string) error {
		for _, sku := range skus {
			if err := s.SetStock(ctx, p+sku, 10); err != nil {
				return err
			}
		}
		return nil
	}
}

// then runs setup, then the steps after it.
func then(setup func(context.Context, *Store, string) error, steps ...func(context.Context, *Store, string) error) func(context.Context, *Store, string) error {
	return func(ctx context.Context, s *Store, p string) error {
		for _, f := range append([]func(context.Context, *Store, string) error{setup}, steps...) {
			if err := f(ctx, s, p); err != nil {
				return err
			}
		}
		return nil
	}
}

func basketOf(p string) []order.Line {
	return []order.Line{{SKU: p + "A", Quantity: 2}, {SKU: p + "B", Quantity: 3}}
}

func reserveLines(ctx context.Context, s *Store, p string) (any, error) {
	return s.ReserveLines(ctx, "o-1", basketOf(p), nil)
}

func reservedBasket(ctx context.Context, s *Store, p string) error {
	_, err := reserveLines(ctx, s, p)
	return err
}

func reservedOrder(ctx context.Context, s *Store, p string) error {
	_, err := s.Reserve(ctx, Order{ID: "o-1", SKU: p + "A", Quantity: 3}, 4)
	return err
}

var (
	lineByLine = WithCrashAfterLine(func(int) error { return nil }) // a saga, as on a cluster
	elision    = WithLockElision(func(sku string) string { return "lock:{" + sku + "}" },
		func(sku string) string { return "redisson_lock_token:lock:{" + sku + "}" }, time.Hour)
)

// resendCases are every write of the package (TestEveryWriteScriptHasAResendCase checks the scripts).
var resendCases = []resendCase{
	{"SetStock", "../stock/set.lua", nil, then(stocked("A"), reservedOrder),
		func(ctx context.Context, s *Store, p string) (any, error) { return nil, s.SetStock(ctx, p+"A", 50) }},
	{"Restock", "restock.lua", nil, stocked("A"),
		func(ctx context.Context, s *Store, p string) (any, error) { return s.Restock(ctx, p+"A", 50) }},
	{"RaiseFence", "raise_fence.lua", nil, then(stocked("A"), func(ctx context.Context, s *Store, p string) error {
		return s.RaiseFence(ctx, p+"A", 2)
	}), func(ctx context.Context, s *Store, p string) (any, error) { return nil, s.RaiseFence(ctx, p+"A", 5) }},
	{"Reserve", "reserve.lua", nil, stocked("A"),
		func(ctx context.Context, s *Store, p string) (any, error) {
			return s.Reserve(ctx, Order{ID: "o-1", SKU: p + "A", Quantity: 3}, 4)
		}},
	{"ReserveBatch", "reserve_batch.lua", nil, stocked("A"), reserveBatch(5)},
	{"ReserveBatch, the lock elided", "reserve_batch.lua", []Option{elision}, stocked("A"), reserveBatch(ElideLock)},
	{"ReserveLines", "reserve_lines.lua", nil, stocked("A", "B"), reserveLines},
	{"ReserveLines, the locks elided", "reserve_lines.lua", []Option{elision}, stocked("A", "B"),
		func(ctx context.Context, s *Store, p string) (any, error) {
			return s.ReserveLines(ctx, "o-1", basketOf(p), Fences{p + "A": ElideLock, p + "B": ElideLock})
		}},
	// The batch's script and the basket's in one pipeline, which go-redis sends again whole.
	{"ReserveBatches, a batch and a basket", "reserve_lines.lua", []Option{elision}, stocked("A", "B"),
		func(ctx context.Context, s *Store, p string) (any, error) {
			return s.ReserveBatches(ctx, []Batch{{Ctx: ctx, Orders: []Order{{ID: "o-1", SKU: p + "A", Quantity: 3}}, Fence: ElideLock},
				{Ctx: ctx, Basket: &Basket{OrderID: "o-2", Lines: basketOf(p), Fences: Fences{p + "A": ElideLock, p + "B": ElideLock}}}}), nil
		}},
	{"ReserveLines line by line", "reserve.lua", []Option{lineByLine}, stocked("A", "B"), reserveLines},
	// B is unknown: the saga gives A back (an abort).
	{"ReserveLines line by line, a short line", "transition.lua", []Option{lineByLine}, stocked("A"), reserveLines},
	{"Release", "release.lua", nil, then(stocked("A"), reservedOrder),
		func(ctx context.Context, s *Store, p string) (any, error) { return s.Release(ctx, "o-1", p+"A", 4) }},
	{"Cancel", "transition.lua", nil, then(stocked("A", "B"), reservedBasket), lifecycle("cancel")},
	{"Fulfil", "transition.lua", nil, then(stocked("A", "B"), reservedBasket), lifecycle("fulfil")},
	{"Cancel line by line", "transition.lua", []Option{lineByLine}, then(stocked("A", "B"), reservedBasket), lifecycle("cancel")},
	{"Fulfil line by line", "transition.lua", []Option{lineByLine}, then(stocked("A", "B"), reservedBasket), lifecycle("fulfil")},
	{"Cancel before the order", "cancel_early.lua", nil, stocked("A"), lifecycle("cancel")},
}

func reserveBatch(fence int64) func(context.Context, *Store, string) (any, error) {
	return func(ctx context.Context, s *Store, p string) (any, error) {
		return s.ReserveBatch(ctx, []Order{{ID: "o-1", SKU: p + "A", Quantity: 3}, {ID: "o-2", SKU: p + "A", Quantity: 20},
			{ID: "o-3", SKU: p + "A", Quantity: 2}}, fence)
	}
}

func lifecycle(op string) func(context.Context, *Store, string) (any, error) {
	return func(ctx context.Context, s *Store, p string) (any, error) {
		if op == "cancel" {
			return s.Cancel(ctx, "o-1", p+"A", nil)
		}
		return s.Fulfil(ctx, "o-1", p+"A", nil)
	}
}

// Every write of the package, its reply lost once (go-redis sends it again), leaves in Redis what one call
// leaves on a Redis of its own, and returns what that call returns: a resent decision comes back as
// recorded, marked Replayed, and a resent stock write finds its latch.
func TestEveryWriteSurvivesALostReply(t *testing.T) {
	ctx := context.Background()
	twin, lossy := redistest.Start(t).Client(), redistest.Start(t)
	direct := lossy.Client()
	proxy := redistest.NewReplyDropper(t, lossy.Addr)
	resending := redis.NewClient(&redis.Options{Addr: proxy.Addr}) // go-redis's default: 3 retries
	t.Cleanup(func() { _ = resending.Close() })
	for _, sc := range scriptFiles {
		if err := sc.Load(ctx, direct).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i, tc := range resendCases {
		t.Run(tc.name, func(t *testing.T) {
			p := fmt.Sprintf("c%d-", i)
			for _, rdb := range []*redis.Client{twin, direct} {
				if err := tc.setup(ctx, New(rdb, tc.opts...), p); err != nil {
					t.Fatalf("setup: %v", err)
				}
			}
			want, wantErr := tc.call(ctx, New(twin, tc.opts...), p)
			dropped := proxy.Dropped()
			proxy.DropReplyTo(scriptFiles[tc.script].Hash(), 1)
			got, err := tc.call(ctx, New(resending, tc.opts...), p)
			if proxy.Dropped() != dropped+1 {
				t.Fatalf("no reply of %s was lost: the case does not run it", tc.script)
			}
			if fmt.Sprint(err) != fmt.Sprint(wantErr) || asSeen(t, got) != asSeen(t, want) {
				t.Fatalf("resent call returned %s, %v\none call returns     %s, %v", asSeen(t, got), err, asSeen(t, want), wantErr)
			}
			if g, w := keyspace(t, direct, p), keyspace(t, twin, p); !maps.Equal(g, w) {
				t.Fatalf("after the resend Redis holds\n%v\none call leaves\n%v", g, w)
			}
		})
	}
}

// A stock count whose reply is lost does not set available again over a reservation that came before
// go-redis's resend: the resend finds its latch. (A plain HSET resent would hand out the reserved units twice.)
func TestAResentStockCountKeepsTheReservationsMadeMeanwhile(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	store := New(srv.Client())
	if err := store.SetStock(ctx, "A", 10); err != nil { // loads the script: the lost reply is of a run
		t.Fatal(err)
	}
	proxy := redistest.NewReplyDropper(t, srv.Addr)
	var dials atomic.Int32
	resending := redis.NewClient(&redis.Options{Addr: proxy.Addr, OnConnect: func(ctx context.Context, _ *redis.Conn) error {
		if dials.Add(1) != 2 {
			return nil
		}
		_, err := store.Reserve(ctx, Order{ID: "o-1", SKU: "A", Quantity: 3}, 0) // before the resend
		return err
	}})
	t.Cleanup(func() { _ = resending.Close() })
	proxy.DropReplyTo(stock.SetScript.Hash(), 1)
	if err := New(resending).SetStock(ctx, "A", 50); err != nil || proxy.Dropped() != 1 || dials.Load() != 2 {
		t.Fatalf("SetStock: %v, %d replies lost, %d connections; want nil, 1 and 2", err, proxy.Dropped(), dials.Load())
	}
	if got, err := store.Get(ctx, "A"); err != nil || got.Available != 47 || got.Reserved != 3 {
		t.Fatalf("stock %+v, %v; want available 47 and reserved 3 (the count, then the reservation)", got, err)
	}
}

// asSeen is what a call returned, as JSON, without its Replayed marks.
func asSeen(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return regexp.MustCompile(`"[Rr]eplayed":(true|false),?`).ReplaceAllString(string(b), "")
}

// keyspace is every key of the case (its SKUs start with p) with its type, content and whether it expires;
// a latch's request id reads as <id> (the latches of a SKU in one entry).
func keyspace(t *testing.T, rdb *redis.Client, p string) map[string]string {
	t.Helper()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, "*{"+p+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string][]string{}
	latch := regexp.MustCompile(`:latch:[0-9a-f-]+$`)
	for _, k := range keys {
		var v any
		switch typ := rdb.Type(ctx, k).Val(); typ {
		case "hash":
			v = rdb.HGetAll(ctx, k).Val()
		case "string":
			v = rdb.Get(ctx, k).Val()
		default:
			v = typ
		}
		b, _ := json.Marshal(v)
		name := latch.ReplaceAllString(k, ":latch:<id>")
		seen[name] = append(seen[name], fmt.Sprintf("%s, expires %v", b, rdb.PTTL(ctx, k).Val() > 0))
	}
	out := map[string]string{}
	for name, vs := range seen {
		slices.Sort(vs)
		out[name] = strings.Join(vs, "; ")
	}
	return out
}

// Every script of the package that writes has a case above: a new one without is a write nobody checked
// against a lost reply.
func TestEveryWriteScriptHasAResendCase(t *testing.T) {
	files, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	write := regexp.MustCompile(`redis\.call\('(SET|HSET|HSETNX|HINCRBY|INCR|DEL|PEXPIRE)'`)
	for _, f := range files {
		if !strings.HasSuffix(f.Name(), ".lua") || f.Name() == "shared.lua" { // shared.lua: the others' prelude
			continue
		}
		src, err := os.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		if _, known := scriptFiles[f.Name()]; !known {
			t.Errorf("%s is not in scriptFiles", f.Name())
		}
		if write.Match(src) && !slices.ContainsFunc(resendCases, func(c resendCase) bool { return c.script == f.Name() }) {
			t.Errorf("%s writes, and no case of TestEveryWriteSurvivesALostReply loses its reply", f.Name())
		}
	}
}
