package stockctl

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed poison_replay.lua
	replayLua    string
	replayScript = redis.NewScript(replayLua)
)

// Results of replaying one entry.
const (
	resultReplayed    = "replayed"
	resultWouldReplay = "would_replay" // --dry-run
	resultMissing     = "missing"
	resultRefused     = "refused"
)

const reasonNotKept = "not replayable: the original entry was not kept"

// scanPage is how many poison entries one XRANGE of a selection reads.
const scanPage = 500

var streamID = regexp.MustCompile(`^[0-9]+-[0-9]+$`)

type replayResult struct {
	ID     string `json:"id"`
	Result string `json:"result"`           // replayed, would_replay, missing or refused
	NewID  string `json:"new_id,omitempty"` // the entry added to the orders stream
	Reason string `json:"reason,omitempty"` // why it was not replayed
}

type replayReport struct {
	From        string         `json:"from"`
	To          string         `json:"to"`
	DryRun      bool           `json:"dry_run"`
	Replayed    int            `json:"replayed"`
	WouldReplay int            `json:"would_replay"` // --dry-run
	Skipped     int            `json:"skipped"`      // missing or refused
	Entries     []replayResult `json:"entries"`
}

// candidate is a selected poison entry; fields is nil when it does not exist.
type candidate struct {
	id     string
	fields map[string]any
}

// runPoisonReplay moves the selected poison entries back to ORDERS_STREAM, oldest first (--id: in the
// order given), one script call each. An --id that does not exist ends in ExitNotFound.
func runPoisonReplay(ctx context.Context, a *app, args []string) error {
	if len(args) != 0 {
		return usageError(fmt.Sprintf("poison replay takes no arguments, got %q (use --id ID)", args))
	}
	if err := checkSelection(a.opts); err != nil {
		return err
	}
	cands, err := a.selectPoison(ctx)
	if err != nil {
		return err
	}
	r := replayReport{From: a.opts.PoisonStream, To: a.opts.OrdersStream, DryRun: a.opts.dryRun, Entries: []replayResult{}}
	var runErr error
	for _, c := range cands {
		res := dryRun(c)
		if !a.opts.dryRun {
			if res, runErr = a.replayOne(ctx, c.id); runErr != nil {
				break
			}
		}
		r.add(res)
	}
	if err := a.emit(r); err != nil || runErr != nil {
		return fmt.Errorf("replay: %w", firstErr(runErr, err))
	}
	return r.missingIDs(len(a.opts.ids) > 0)
}

func checkSelection(o *options) error {
	modes := 0
	for _, given := range []bool{len(o.ids) > 0, o.given["reason-contains"], o.all} {
		if given {
			modes++
		}
	}
	if modes != 1 {
		return usageError("poison replay wants exactly one of --id ID (repeatable), --reason-contains S, --all")
	}
	for _, id := range o.ids {
		if !streamID.MatchString(id) {
			return usageError(fmt.Sprintf("invalid --id %q: want a stream entry id such as 1700000000000-0", id))
		}
	}
	if o.given["reason-contains"] && o.reasonContains == "" {
		return usageError("invalid --reason-contains \"\": would select every entry; use --all")
	}
	return nil
}

// selectPoison returns the entries named by --id, or those of the whole stream that match.
func (a *app) selectPoison(ctx context.Context) ([]candidate, error) {
	if len(a.opts.ids) > 0 {
		return a.selectIDs(ctx)
	}
	var out []candidate
	for start := "-"; ; {
		msgs, err := a.rdb.XRangeN(ctx, a.opts.PoisonStream, start, "+", scanPage).Result()
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			reason, _ := m.Values[fieldReason].(string)
			if a.opts.all || strings.Contains(reason, a.opts.reasonContains) {
				out = append(out, candidate{id: m.ID, fields: m.Values})
			}
		}
		if len(msgs) < scanPage {
			return out, nil
		}
		start = "(" + msgs[len(msgs)-1].ID
	}
}

func (a *app) selectIDs(ctx context.Context) ([]candidate, error) {
	var out []candidate
	var seen []string
	for _, id := range a.opts.ids {
		if slices.Contains(seen, id) {
			continue
		}
		seen = append(seen, id)
		msgs, err := a.rdb.XRangeN(ctx, a.opts.PoisonStream, id, id, 1).Result()
		if err != nil {
			return nil, err
		}
		c := candidate{id: id}
		if len(msgs) == 1 {
			c.fields = msgs[0].Values
		}
		out = append(out, c)
	}
	return out, nil
}

// dryRun is what replaying c would do, as far as can be told without writing.
func dryRun(c candidate) replayResult {
	switch {
	case c.fields == nil:
		return replayResult{ID: c.id, Result: resultMissing, Reason: "no such poison entry"}
	case !replayable(c.fields):
		return replayResult{ID: c.id, Result: resultRefused, Reason: reasonNotKept}
	}
	return replayResult{ID: c.id, Result: resultWouldReplay}
}

// replayOne runs poison_replay.lua for one entry.
func (a *app) replayOne(ctx context.Context, id string) (replayResult, error) {
	keys := []string{a.opts.PoisonStream, a.opts.OrdersStream}
	reply, err := replayScript.Run(ctx, a.rdb, keys, id).StringSlice()
	if err != nil {
		return replayResult{}, fmt.Errorf("poison entry %s: %w", id, err)
	}
	res := replayResult{ID: id}
	switch {
	case len(reply) == 2 && reply[0] == resultReplayed:
		res.Result, res.NewID = resultReplayed, reply[1]
	case len(reply) == 2 && reply[0] == resultRefused:
		res.Result, res.Reason = resultRefused, reply[1]
	case len(reply) == 1 && reply[0] == resultMissing:
		res.Result, res.Reason = resultMissing, "no such poison entry (already replayed, or trimmed)"
	default:
		return replayResult{}, fmt.Errorf("poison entry %s: unexpected script reply %q", id, reply)
	}
	return res, nil
}

func (r *replayReport) add(res replayResult) {
	switch res.Result {
	case resultReplayed:
		r.Replayed++
	case resultWouldReplay:
		r.WouldReplay++
	default:
		r.Skipped++
	}
	r.Entries = append(r.Entries, res)
}

// missingIDs is a not-found error when ids were named and some of them do not exist.
func (r *replayReport) missingIDs(named bool) error {
	var missing []string
	for _, e := range r.Entries {
		if e.Result == resultMissing {
			missing = append(missing, e.ID)
		}
	}
	if !named || len(missing) == 0 {
		return nil
	}
	return notFound("no such poison entry: " + strings.Join(missing, ", "))
}

func (r replayReport) writeText(w io.Writer) {
	for _, e := range r.Entries {
		switch e.Result {
		case resultReplayed:
			fmt.Fprintf(w, "replayed  %s -> %s %s\n", e.ID, r.To, e.NewID)
		case resultWouldReplay:
			fmt.Fprintf(w, "would replay  %s -> %s\n", e.ID, r.To)
		default:
			fmt.Fprintf(w, "skipped  %s: %s\n", e.ID, e.Reason)
		}
	}
	if r.DryRun {
		fmt.Fprintf(w, "dry run: %d would be replayed from %s to %s, %d skipped; nothing was written\n",
			r.WouldReplay, r.From, r.To, r.Skipped)
		return
	}
	fmt.Fprintf(w, "%d replayed from %s to %s, %d skipped\n", r.Replayed, r.From, r.To, r.Skipped)
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
