package stockctl

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
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
// order given), one script call each, and refuses those whose order is too old for its outcome records
// (ageCheck) unless --force. An --id that does not exist ends in ExitNotFound, a replay that replays
// nothing in ExitNothingDone.
func runPoisonReplay(ctx context.Context, a *app, _ []string) (report, error) {
	if err := checkSelection(a.opts); err != nil {
		return nil, err
	}
	cands, err := a.selectPoison(ctx)
	if err != nil {
		return nil, err
	}
	tooOld, err := a.ageCheck(ctx)
	if err != nil {
		return nil, err
	}
	replay := func(ctx context.Context, c candidate) (replayResult, error) {
		if reason := tooOld(c); reason != "" && c.fields != nil && replayable(c.fields) {
			return replayResult{ID: c.id, Result: resultRefused, Reason: reason}, nil
		}
		return a.replayCandidate(ctx, c)
	}
	r := &replayReport{From: a.opts.PoisonStream, To: a.opts.OrdersStream, DryRun: a.opts.dryRun, Entries: []replayResult{}}
	if err := forEach(ctx, cands, replay, r.add); err != nil {
		return r, fmt.Errorf("replay: %w", err)
	}
	return r, firstErr(r.missingIDs(len(a.opts.ids) > 0), r.nothingDone())
}

// nothingDone is ExitNothingDone when the replay replayed nothing. A dry run did what it was asked, show.
func (r *replayReport) nothingDone() error {
	if r.Replayed > 0 || r.DryRun {
		return nil
	}
	return nothingDone(fmt.Sprintf("nothing replayed: %d selected, %d skipped", len(r.Entries), r.Skipped))
}

func checkSelection(o *options) error {
	switch {
	case o.selections() != 1:
		return usageError("poison replay wants exactly one of --id ID (repeatable), --reason-contains S, --all")
	case o.given("reason-contains") && o.reasonContains == "":
		return usageError("invalid --reason-contains \"\": would select every entry; use --all")
	}
	return checkIDs(o.ids)
}

// selections counts the ways of selecting entries given: --id, --reason-contains and --all.
func (o *options) selections() int {
	n := 0
	for _, given := range []bool{len(o.ids) > 0, o.given("reason-contains"), o.all} {
		if given {
			n++
		}
	}
	return n
}

func checkIDs(ids []string) error {
	for _, id := range ids {
		if !streamID.MatchString(id) {
			return usageError(fmt.Sprintf("invalid --id %q: want a stream entry id such as 1700000000000-0", id))
		}
	}
	return nil
}

// selectPoison returns the entries named by --id (each once, in the order given), or those of the whole
// stream that match.
func (a *app) selectPoison(ctx context.Context) ([]candidate, error) {
	if len(a.opts.ids) > 0 {
		return mapEach(ctx, distinct(a.opts.ids), a.poisonByID)
	}
	return a.scanPoison(ctx)
}

// scanPoison reads the poison stream a page at a time and keeps the entries that match the selection.
func (a *app) scanPoison(ctx context.Context) ([]candidate, error) {
	var out []candidate
	for start := "-"; ; {
		msgs, err := a.rdb.XRangeN(ctx, a.opts.PoisonStream, start, "+", scanPage).Result()
		if err != nil {
			return nil, err
		}
		out = append(out, a.matching(msgs)...)
		if len(msgs) < scanPage {
			return out, nil
		}
		start = "(" + msgs[len(msgs)-1].ID
	}
}

// matching keeps the entries selected by --all or --reason-contains.
func (a *app) matching(msgs []redis.XMessage) []candidate {
	var out []candidate
	for _, m := range msgs {
		if reason, _ := m.Values[fieldReason].(string); a.opts.selects(reason) {
			out = append(out, candidate{id: m.ID, fields: m.Values})
		}
	}
	return out
}

// selects reports whether a poison entry with reason is selected by --all or --reason-contains.
func (o *options) selects(reason string) bool {
	return o.all || strings.Contains(reason, o.reasonContains)
}

// poisonByID reads the poison entry id; its fields are nil when it does not exist.
func (a *app) poisonByID(ctx context.Context, id string) (candidate, error) {
	msgs, err := a.rdb.XRangeN(ctx, a.opts.PoisonStream, id, id, 1).Result()
	if err != nil {
		return candidate{}, err
	}
	c := candidate{id: id}
	if len(msgs) == 1 {
		c.fields = msgs[0].Values
	}
	return c, nil
}

// distinct is ids without repeats, in the order of their first appearance.
func distinct(ids []string) []string {
	var out []string
	for _, id := range ids {
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// replayCandidate replays c, or with --dry-run tells what replaying it would do.
func (a *app) replayCandidate(ctx context.Context, c candidate) (replayResult, error) {
	if a.opts.dryRun {
		return dryRun(c), nil
	}
	return a.replayOne(ctx, c.id)
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

// replayLatchTTL is how long a replay's latch remembers the entry it added: far longer than go-redis takes
// to resend a command whose reply was lost.
const replayLatchTTL = time.Minute

// replayOne runs poison_replay.lua for one entry, with a request id of its own for its latch.
func (a *app) replayOne(ctx context.Context, id string) (replayResult, error) {
	latch := a.opts.PoisonStream + ":replay-latch:" + uuid.NewString() // in the poison stream's slot
	keys := []string{a.opts.PoisonStream, a.opts.OrdersStream, latch}
	reply, err := replayScript.Run(ctx, a.rdb, keys, id, replayLatchTTL.Milliseconds()).StringSlice()
	if err != nil {
		return replayResult{}, fmt.Errorf("poison entry %s: %w", id, err)
	}
	res, ok := toReplayResult(id, reply)
	if !ok {
		return replayResult{}, fmt.Errorf("poison entry %s: unexpected script reply %q", id, reply)
	}
	return res, nil
}

// toReplayResult reads a reply of poison_replay.lua: {replayed, new id}, {refused, reason} or {missing}.
func toReplayResult(id string, reply []string) (replayResult, bool) {
	switch {
	case slices.Equal(reply, []string{resultMissing}):
		return replayResult{ID: id, Result: resultMissing, Reason: "no such poison entry (already replayed, or trimmed)"}, true
	case len(reply) != 2:
		return replayResult{}, false
	case reply[0] == resultReplayed:
		return replayResult{ID: id, Result: resultReplayed, NewID: reply[1]}, true
	case reply[0] == resultRefused:
		return replayResult{ID: id, Result: resultRefused, Reason: reply[1]}, true
	}
	return replayResult{}, false
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
	var ids []string
	for _, e := range r.Entries {
		if named && e.Result == resultMissing {
			ids = append(ids, e.ID)
		}
	}
	return missing("no such poison entry", ids)
}

func (r replayReport) writeText(w io.Writer) {
	for _, e := range r.Entries {
		fmt.Fprintln(w, r.line(e))
	}
	if r.DryRun {
		fmt.Fprintf(w, "dry run: %d would be replayed from %s to %s, %d skipped; nothing was written\n",
			r.WouldReplay, r.From, r.To, r.Skipped)
		return
	}
	fmt.Fprintf(w, "%d replayed from %s to %s, %d skipped\n", r.Replayed, r.From, r.To, r.Skipped)
}

// line is the text of one replayed or skipped entry.
func (r replayReport) line(e replayResult) string {
	switch e.Result {
	case resultReplayed:
		return fmt.Sprintf("replayed  %s -> %s %s", e.ID, r.To, e.NewID)
	case resultWouldReplay:
		return fmt.Sprintf("would replay  %s -> %s", e.ID, r.To)
	}
	return fmt.Sprintf("skipped  %s: %s", e.ID, e.Reason)
}
