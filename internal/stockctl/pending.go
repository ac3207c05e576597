package stockctl

import (
	"context"
	"fmt"
	"io"
	"slices"
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
func runPending(ctx context.Context, a *app, _ []string) (report, error) {
	g, consumers, err := a.groupAndConsumers(ctx)
	if err != nil {
		return nil, err
	}
	entries, err := a.pendingEntries(ctx, g.Name)
	if err != nil {
		return nil, err
	}
	return pendingReport{Stream: a.opts.OrdersStream, Group: g, Consumers: consumers, Entries: entries}, nil
}

// groupAndConsumers reads the consumer group of ORDERS_STREAM and its consumers.
func (a *app) groupAndConsumers(ctx context.Context) (groupInfo, []consumerInfo, error) {
	g, err := a.group(ctx)
	if err != nil {
		return groupInfo{}, nil, err
	}
	consumers, err := a.consumers(ctx)
	return g, consumers, err
}

// group returns the consumer group of ORDERS_STREAM, or a not-found error that says what is missing.
func (a *app) group(ctx context.Context) (groupInfo, error) {
	stream, name := a.opts.OrdersStream, a.opts.ConsumerGroup
	if err := a.checkStream(ctx); err != nil {
		return groupInfo{}, err
	}
	groups, err := a.rdb.XInfoGroups(ctx, stream).Result()
	if err != nil {
		return groupInfo{}, fmt.Errorf("XINFO GROUPS %s: %w", stream, err)
	}
	i := slices.IndexFunc(groups, func(g redis.XInfoGroup) bool { return g.Name == name })
	if i < 0 {
		return groupInfo{}, notFound(fmt.Sprintf("consumer group %q does not exist on stream %q (%s)", name, stream, groupsNote(groups)))
	}
	return toGroupInfo(groups[i]), nil
}

// checkStream is a not-found error when ORDERS_STREAM does not exist.
func (a *app) checkStream(ctx context.Context) error {
	n, err := a.rdb.Exists(ctx, a.opts.OrdersStream).Result()
	if err == nil && n == 0 {
		return notFound(fmt.Sprintf("stream %q does not exist (no order was published, or ORDERS_STREAM is wrong)", a.opts.OrdersStream))
	}
	return err
}

// groupsNote names the groups a stream has, for the error about the one it lacks.
func groupsNote(groups []redis.XInfoGroup) string {
	names := make([]string, len(groups))
	for i, g := range groups {
		names[i] = g.Name
	}
	if len(names) == 0 {
		return "it has no groups"
	}
	return "its groups: " + strings.Join(names, ", ")
}

func toGroupInfo(g redis.XInfoGroup) groupInfo {
	info := groupInfo{Name: g.Name, Consumers: g.Consumers, Pending: g.Pending, LastDeliveredID: g.LastDeliveredID}
	if g.Lag >= 0 {
		info.Lag = &g.Lag
	}
	return info
}

// consumers lists the consumers of the group. The reply is read by hand: go-redis cannot tell a missing
// inactive field (Redis before 7.2) from 0.
func (a *app) consumers(ctx context.Context) ([]consumerInfo, error) {
	reply, err := a.rdb.Do(ctx, "XINFO", "CONSUMERS", a.opts.OrdersStream, a.opts.ConsumerGroup).Slice()
	if err != nil {
		return nil, fmt.Errorf("XINFO CONSUMERS %s %s: %w", a.opts.OrdersStream, a.opts.ConsumerGroup, err)
	}
	return convert(reply, toConsumerInfo), nil
}

// toConsumerInfo reads one consumer of an XINFO CONSUMERS reply.
func toConsumerInfo(item any) consumerInfo {
	m := replyMap(item)
	var c consumerInfo
	c.Name, _ = m["name"].(string)
	c.Pending, _ = m["pending"].(int64)
	c.IdleMS, _ = m["idle"].(int64)
	if v, ok := m["inactive"].(int64); ok && v >= 0 {
		c.InactiveMS = &v
	}
	return c
}

// replyMap reads a map reply of RESP3 (a map) or RESP2 (a flat list of names and values).
func replyMap(v any) map[string]any {
	m := map[string]any{}
	switch v := v.(type) {
	case map[any]any:
		for k, x := range v {
			addField(m, k, x)
		}
	case []any:
		for i := 0; i+1 < len(v); i += 2 {
			addField(m, v[i], v[i+1])
		}
	}
	return m
}

// addField adds a field of a map reply; a name that is not a string is left out.
func addField(m map[string]any, name, value any) {
	if s, ok := name.(string); ok {
		m[s] = value
	}
}

// pendingEntries are the oldest --limit entries of group not acked yet.
func (a *app) pendingEntries(ctx context.Context, group string) ([]pendingEntry, error) {
	ext, err := a.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: a.opts.OrdersStream, Group: group,
		Start: "-", End: "+", Count: int64(a.opts.limit)}).Result()
	if err != nil {
		return nil, err
	}
	return convert(ext, toPendingEntry), nil
}

func toPendingEntry(e redis.XPendingExt) pendingEntry {
	return pendingEntry{ID: e.ID, Consumer: e.Consumer, IdleMS: millis(e.Idle), Deliveries: e.RetryCount}
}

func (r pendingReport) writeText(w io.Writer) {
	fmt.Fprintf(w, "stream %s, group %s: %d consumers, %d pending, lag %s, last delivered %s\n\n",
		r.Stream, r.Group.Name, r.Group.Consumers, r.Group.Pending, r.Group.lag(), r.Group.LastDeliveredID)
	writeConsumers(w, r.Consumers, true)
	r.writeEntries(w)
}

func (g groupInfo) lag() string {
	if g.Lag == nil {
		return "unknown"
	}
	return fmt.Sprint(*g.Lag)
}

func (c consumerInfo) inactive() string {
	if c.InactiveMS == nil {
		return "-"
	}
	return human(*c.InactiveMS)
}

func (r pendingReport) writeEntries(w io.Writer) {
	if len(r.Entries) == 0 {
		fmt.Fprintln(w, "\nno pending entries")
		return
	}
	fmt.Fprintf(w, "\npending entries, oldest first (%d of %d):\n", len(r.Entries), r.Group.Pending)
	tw := table(w)
	fmt.Fprintln(tw, "ID\tCONSUMER\tIDLE\tDELIVERIES")
	for _, e := range r.Entries {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", e.ID, e.Consumer, human(e.IdleMS), e.Deliveries)
	}
	_ = tw.Flush()
}
