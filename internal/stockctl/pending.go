package stockctl

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/redis/go-redis/v9"
)

// groupInfo is the consumer group of ORDERS_STREAM (XINFO GROUPS).
type groupInfo struct {
	Name            string `json:"name"`
	Consumers       int64  `json:"consumers"`
	Pending         int64  `json:"pending"`
	Lag             *int64 `json:"lag"` // null when Redis cannot tell
	LastDeliveredID string `json:"last_delivered_id"`
}

// consumerInfo is one consumer of the group (XINFO CONSUMERS).
type consumerInfo struct {
	Name       string `json:"name"`
	Pending    int64  `json:"pending"`
	IdleMS     int64  `json:"idle_ms"`     // since its last read or claim attempt
	InactiveMS *int64 `json:"inactive_ms"` // since its last successful read or claim; null before Redis 7.2 or when never
}

// pendingEntry is one entry delivered and not acked yet (XPENDING).
type pendingEntry struct {
	ID         string `json:"id"`
	Consumer   string `json:"consumer"`
	IdleMS     int64  `json:"idle_ms"`
	Deliveries int64  `json:"deliveries"`
}

type pendingReport struct {
	Stream    string         `json:"stream"`
	Group     groupInfo      `json:"group"`
	Consumers []consumerInfo `json:"consumers"`
	Entries   []pendingEntry `json:"entries"` // the oldest --limit pending entries
}

// runPending shows the consumer group, its consumers and its oldest pending entries.
func runPending(ctx context.Context, a *app, args []string) error {
	if len(args) != 0 {
		return usageError(fmt.Sprintf("pending takes no arguments, got %q", args))
	}
	g, err := a.group(ctx)
	if err != nil {
		return err
	}
	r := pendingReport{Stream: a.opts.OrdersStream, Group: g}
	if r.Consumers, err = a.consumers(ctx); err != nil {
		return err
	}
	ext, err := a.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: a.opts.OrdersStream, Group: g.Name,
		Start: "-", End: "+", Count: int64(a.opts.limit)}).Result()
	if err != nil {
		return err
	}
	r.Entries = make([]pendingEntry, len(ext))
	for i, e := range ext {
		r.Entries[i] = pendingEntry{ID: e.ID, Consumer: e.Consumer, IdleMS: millis(e.Idle), Deliveries: e.RetryCount}
	}
	return a.emit(r)
}

// group returns the consumer group of ORDERS_STREAM, or a not-found error that says what is missing.
func (a *app) group(ctx context.Context) (groupInfo, error) {
	stream, name := a.opts.OrdersStream, a.opts.ConsumerGroup
	n, err := a.rdb.Exists(ctx, stream).Result()
	if err != nil {
		return groupInfo{}, err
	}
	if n == 0 {
		return groupInfo{}, notFound(fmt.Sprintf("stream %q does not exist (no order was published, or ORDERS_STREAM is wrong)", stream))
	}
	groups, err := a.rdb.XInfoGroups(ctx, stream).Result()
	if err != nil {
		return groupInfo{}, fmt.Errorf("XINFO GROUPS %s: %w", stream, err)
	}
	var names []string
	for _, g := range groups {
		if g.Name == name {
			info := groupInfo{Name: g.Name, Consumers: g.Consumers, Pending: g.Pending, LastDeliveredID: g.LastDeliveredID}
			if g.Lag >= 0 {
				info.Lag = &g.Lag
			}
			return info, nil
		}
		names = append(names, g.Name)
	}
	have := "it has no groups"
	if len(names) > 0 {
		have = "its groups: " + strings.Join(names, ", ")
	}
	return groupInfo{}, notFound(fmt.Sprintf("consumer group %q does not exist on stream %q (%s)", name, stream, have))
}

// consumers lists the consumers of the group. The reply is read by hand: go-redis cannot tell a missing
// inactive field (Redis before 7.2) from 0.
func (a *app) consumers(ctx context.Context) ([]consumerInfo, error) {
	reply, err := a.rdb.Do(ctx, "XINFO", "CONSUMERS", a.opts.OrdersStream, a.opts.ConsumerGroup).Slice()
	if err != nil {
		return nil, fmt.Errorf("XINFO CONSUMERS %s %s: %w", a.opts.OrdersStream, a.opts.ConsumerGroup, err)
	}
	out := make([]consumerInfo, 0, len(reply))
	for _, item := range reply {
		m := replyMap(item)
		c := consumerInfo{}
		c.Name, _ = m["name"].(string)
		c.Pending, _ = m["pending"].(int64)
		c.IdleMS, _ = m["idle"].(int64)
		if v, ok := m["inactive"].(int64); ok && v >= 0 {
			c.InactiveMS = &v
		}
		out = append(out, c)
	}
	return out, nil
}

func (r pendingReport) writeText(w io.Writer) {
	lag := "unknown"
	if r.Group.Lag != nil {
		lag = fmt.Sprint(*r.Group.Lag)
	}
	fmt.Fprintf(w, "stream %s, group %s: %d consumers, %d pending, lag %s, last delivered %s\n\n",
		r.Stream, r.Group.Name, r.Group.Consumers, r.Group.Pending, lag, r.Group.LastDeliveredID)
	tw := table(w)
	fmt.Fprintln(tw, "CONSUMER\tPENDING\tIDLE\tINACTIVE")
	for _, c := range r.Consumers {
		inactive := "-"
		if c.InactiveMS != nil {
			inactive = human(*c.InactiveMS)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", c.Name, c.Pending, human(c.IdleMS), inactive)
	}
	_ = tw.Flush()
	if len(r.Entries) == 0 {
		fmt.Fprintln(w, "\nno pending entries")
		return
	}
	fmt.Fprintf(w, "\npending entries, oldest first (%d of %d):\n", len(r.Entries), r.Group.Pending)
	tw = table(w)
	fmt.Fprintln(tw, "ID\tCONSUMER\tIDLE\tDELIVERIES")
	for _, e := range r.Entries {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", e.ID, e.Consumer, human(e.IdleMS), e.Deliveries)
	}
	_ = tw.Flush()
}
