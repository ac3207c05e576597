package harness

import (
	"context"
	"fmt"
)

// lineCounts are the basket sizes comparison 7 measures.
var lineCounts = []int{1, 2, 4}

func linesTable(orders int) *Table {
	return &Table{
		ID:    "lines",
		Title: "7. baskets: what one line more costs, 2 worker processes, lock on",
		Setup: fmt.Sprintf("%d orders per round of 1, 2 or 4 lines (distinct SKUs, uniform over 200 SKUs, 1 unit each; "+
			"a 1-line order is a basket too: the lines form), stock for about all of them; orders/s from the first order "+
			"placed to the last outcome", orders),
		Columns: []Column{{Key: "orders_per_s", Header: "orders/s"}, {Key: "lines_per_s", Header: "lines/s"},
			{Key: "latency_p50_ms", Header: "p50 latency ms", Digits: 1}, {Key: "latency_p99_ms", Header: "p99 latency ms", Digits: 1},
			{Key: "redis_cpu_us", Header: "Redis CPU µs/order", Digits: 0},
			{Key: "redis_cpu_us_line", Header: "Redis CPU µs/line", Digits: 0},
			{Key: "worker_cpu_us", Header: "workers CPU µs/order", Digits: 0}},
		RatioOf: "orders_per_s", RatioBase: linesName(1),
	}
}

func linesName(n int) string {
	if n == 1 {
		return "1 line"
	}
	return fmt.Sprintf("%d lines", n)
}

// lines is comparison 7: orders of 1, 2 and 4 lines through the end-to-end pipeline.
func (b *bench) lines(ctx context.Context) error {
	if b.cfg.WorkerBin == "" {
		b.progress("lines skipped: no worker binary (scripts/bench.sh builds it)")
		return nil
	}
	orders := b.cfg.E2EHotOrders
	t := b.addTable(linesTable(orders))
	return interleave(b.cfg.Rounds, len(lineCounts), func(round, i int) error {
		n := lineCounts[i]
		wl := e2eWorkload{id: "lines", title: linesName(n), distribution: "uniform", orders: orders, lines: n}
		res, err := b.e2eRun(ctx, b.single(1), e2eModes[0], wl)
		if err != nil {
			return fmt.Errorf("lines %d: %w", n, err)
		}
		v := res.values(orders)
		v["lines_per_s"] = v["orders_per_s"] * float64(n)
		v["redis_cpu_us_line"] = v["redis_cpu_us"] / float64(n)
		b.progress("lines round %d/%d %-8s %7.0f orders/s %7.0f lines/s  p99 %7.1f ms  Redis CPU %4.0f µs/order",
			round+1, b.cfg.Rounds, linesName(n), v["orders_per_s"], v["lines_per_s"], v["latency_p99_ms"], v["redis_cpu_us"])
		t.add(linesName(n), v)
		b.checkE2E("lines "+linesName(n), round, res)
		return nil
	})
}
