package stockctl

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/stockflow/stockflow/redisstream"
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

// consumersReport lists the consumers of the group.
type consumersReport struct {
	Stream    string         `json:"stream"`
	Group     string         `json:"group"`
	Consumers []consumerInfo `json:"consumers"`
}

// runConsumers lists the consumers of the group.
func runConsumers(ctx context.Context, a *app, _ []string) (report, error) {
	g, list, err := a.groupAndConsumers(ctx)
	if err != nil {
		return nil, err
	}
	return consumersReport{Stream: a.opts.OrdersStream, Group: g.Name, Consumers: list}, nil
}

func (r consumersReport) writeText(w io.Writer) { writeConsumers(w, r.Consumers, false) }

func (r consumersReport) writeWide(w io.Writer) { writeConsumers(w, r.Consumers, true) }

// writeConsumers writes a table of consumers; wide adds the time since each last read something.
func writeConsumers(w io.Writer, consumers []consumerInfo, wide bool) {
	tw := table(w)
	fmt.Fprint(tw, "CONSUMER\tPENDING\tIDLE")
	if wide {
		fmt.Fprint(tw, "\tINACTIVE")
	}
	fmt.Fprintln(tw)
	for _, c := range consumers {
		fmt.Fprintf(tw, "%s\t%d\t%s", c.Name, c.Pending, human(c.IdleMS))
		if wide {
			fmt.Fprintf(tw, "\t%s", c.inactive())
		}
		fmt.Fprintln(tw)
	}
	_ = tw.Flush()
}

// runConsumersPrune deletes the consumers of the group that have no pending entries and have been idle
// longer than --idle; one that deletes none ends in ExitNothingDone (not a dry run). Each deletion is checked again inside Redis (prune_consumer.lua), so a consumer
// that read an entry since it was listed keeps it. Before Redis 7.2 a read that finds nothing does not
// reset a consumer's idle time, so a live worker's consumer on a quiet stream can be pruned too; that loses
// nothing (it has no pending entries) and its next read creates it again.
func runConsumersPrune(ctx context.Context, a *app, _ []string) (report, error) {
	g, list, err := a.groupAndConsumers(ctx)
	if err != nil {
		return nil, err
	}
	r := &pruneReport{Stream: a.opts.OrdersStream, Group: g.Name, MinIdleMS: millis(a.opts.idle), DryRun: a.opts.dryRun,
		Consumers: []pruneResult{}}
	if err := forEach(ctx, list, a.pruneOne, r.add); err != nil {
		return r, err
	}
	if r.Deleted == 0 && !r.DryRun { // a dry run did what it was asked, show

		return r, nothingDone(fmt.Sprintf("no consumer deleted: %d kept", r.Kept))
	}
	return r, nil
}

// pruneOne deletes consumer c when it qualifies (with --dry-run, tells whether it would).
func (a *app) pruneOne(ctx context.Context, c consumerInfo) (pruneResult, error) {
	res := pruneResult{Name: c.Name, Pending: c.Pending, IdleMS: c.IdleMS, Action: actionKept,
		Reason: c.keepReason(a.opts.idle)}
	switch {
	case res.Reason != "":
		return res, nil
	case a.opts.dryRun:
		res.Action = actionWouldDelete
		return res, nil
	}
	outcome, n, err := a.pruneConsumer(ctx, c.Name)
	return res.withOutcome(outcome, n), err
}

// keepReason says why c is kept, "" when it may be deleted.
func (c consumerInfo) keepReason(minIdle time.Duration) string {
	switch {
	case c.Pending > 0:
		return pendingReason(c.Pending)
	case c.IdleMS <= millis(minIdle):
		return activeReason(c.IdleMS)
	}
	return ""
}

func pendingReason(n int64) string { return fmt.Sprintf("%d pending entries", n) }

func activeReason(idleMS int64) string { return "active " + human(idleMS) + " ago" }

// pruneConsumer prunes one consumer (redisstream.Group.PruneConsumer): its outcome, and the idle time or
// pending count it decided on.
func (a *app) pruneConsumer(ctx context.Context, name string) (string, int64, error) {
	return redisstream.Group{Stream: a.opts.OrdersStream, Name: a.opts.ConsumerGroup}.PruneConsumer(ctx, a.rdb, name, a.opts.idle)
}

// withOutcome is res after the script's outcome: deleted, or kept and why.
func (res pruneResult) withOutcome(outcome string, n int64) pruneResult {
	switch outcome {
	case "deleted":
		res.Action, res.IdleMS = actionDeleted, n
	case "pending":
		res.Pending, res.Reason = n, pendingReason(n)
	case "active":
		res.IdleMS, res.Reason = n, activeReason(n)
	default:
		res.Reason = "no longer exists"
	}
	return res
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
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", c.Name, c.Pending, human(c.IdleMS), c.describe())
	}
	_ = tw.Flush()
	if r.DryRun {
		fmt.Fprintf(w, "dry run: %d would be deleted, %d kept; nothing was written\n", r.WouldDelete, r.Kept)
		return
	}
	fmt.Fprintf(w, "%d deleted, %d kept (group %s of %s, idle longer than %s, no pending entries)\n",
		r.Deleted, r.Kept, r.Group, r.Stream, human(r.MinIdleMS))
}

// describe is the action with the reason it was kept.
func (res pruneResult) describe() string {
	if res.Reason == "" {
		return res.Action
	}
	return res.Action + " (" + res.Reason + ")"
}
