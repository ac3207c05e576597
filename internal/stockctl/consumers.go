package stockctl

import (
	"context"
	_ "embed"
	"fmt"
	"io"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed prune_consumer.lua
	pruneLua    string
	pruneScript = redis.NewScript(pruneLua)
)

// Actions of consumers prune.
const (
	actionDeleted     = "deleted"
	actionWouldDelete = "would_delete" // --dry-run
	actionKept        = "kept"
)

type pruneResult struct {
	Name    string `json:"name"`
	Pending int64  `json:"pending"`
	IdleMS  int64  `json:"idle_ms"`
	Action  string `json:"action"`           // deleted, would_delete or kept
	Reason  string `json:"reason,omitempty"` // why it was kept
}

type pruneReport struct {
	Stream      string        `json:"stream"`
	Group       string        `json:"group"`
	MinIdleMS   int64         `json:"min_idle_ms"`
	DryRun      bool          `json:"dry_run"`
	Deleted     int           `json:"deleted"`
	WouldDelete int           `json:"would_delete"`
	Kept        int           `json:"kept"`
	Consumers   []pruneResult `json:"consumers"`
}

// runConsumersPrune deletes the consumers of the group that have no pending entries and have been idle
// longer than --idle. Each deletion is checked again inside Redis (prune_consumer.lua), so a consumer
// that read an entry since it was listed keeps it. Before Redis 7.2 a read that finds nothing does not
// reset a consumer's idle time, so a live worker's consumer on a quiet stream can be pruned too; that loses
// nothing (it has no pending entries) and its next read creates it again.
func runConsumersPrune(ctx context.Context, a *app, args []string) error {
	if len(args) != 0 {
		return usageError(fmt.Sprintf("consumers prune takes no arguments, got %q", args))
	}
	g, err := a.group(ctx)
	if err != nil {
		return err
	}
	list, err := a.consumers(ctx)
	if err != nil {
		return err
	}
	r := pruneReport{Stream: a.opts.OrdersStream, Group: g.Name, MinIdleMS: millis(a.opts.idle), DryRun: a.opts.dryRun,
		Consumers: []pruneResult{}}
	for _, c := range list {
		res, err := a.pruneOne(ctx, c)
		if err != nil {
			_ = a.emit(r)
			return err
		}
		r.add(res)
	}
	return a.emit(r)
}

func (a *app) pruneOne(ctx context.Context, c consumerInfo) (pruneResult, error) {
	res := pruneResult{Name: c.Name, Pending: c.Pending, IdleMS: c.IdleMS, Action: actionKept}
	switch {
	case c.Pending > 0:
		res.Reason = fmt.Sprintf("%d pending entries", c.Pending)
		return res, nil
	case c.IdleMS <= millis(a.opts.idle):
		res.Reason = "active " + human(c.IdleMS) + " ago"
		return res, nil
	case a.opts.dryRun:
		res.Action = actionWouldDelete
		return res, nil
	}
	keys := []string{a.opts.OrdersStream}
	reply, err := pruneScript.Run(ctx, a.rdb, keys, a.opts.ConsumerGroup, c.Name, millis(a.opts.idle)).Slice()
	if err != nil {
		return res, fmt.Errorf("prune consumer %s: %w", c.Name, err)
	}
	if len(reply) != 2 {
		return res, fmt.Errorf("prune consumer %s: unexpected script reply %v", c.Name, reply)
	}
	outcome, _ := reply[0].(string)
	n, _ := reply[1].(int64)
	switch outcome {
	case "deleted":
		res.Action, res.IdleMS = actionDeleted, n
	case "pending":
		res.Pending, res.Reason = n, fmt.Sprintf("%d pending entries", n)
	case "active":
		res.IdleMS, res.Reason = n, "active "+human(n)+" ago"
	default:
		res.Reason = "no longer exists"
	}
	return res, nil
}

func (r *pruneReport) add(res pruneResult) {
	switch res.Action {
	case actionDeleted:
		r.Deleted++
	case actionWouldDelete:
		r.WouldDelete++
	default:
		r.Kept++
	}
	r.Consumers = append(r.Consumers, res)
}

func (r pruneReport) writeText(w io.Writer) {
	tw := table(w)
	fmt.Fprintln(tw, "CONSUMER\tPENDING\tIDLE\tACTION")
	for _, c := range r.Consumers {
		action := c.Action
		if c.Reason != "" {
			action += " (" + c.Reason + ")"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", c.Name, c.Pending, human(c.IdleMS), action)
	}
	_ = tw.Flush()
	if r.DryRun {
		fmt.Fprintf(w, "dry run: %d would be deleted, %d kept; nothing was written\n", r.WouldDelete, r.Kept)
		return
	}
	fmt.Fprintf(w, "%d deleted, %d kept (group %s of %s, idle longer than %s, no pending entries)\n",
		r.Deleted, r.Kept, r.Group, r.Stream, human(r.MinIdleMS))
}
