package stockctl

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// fieldFirstSource is the orders entry id an order was first published as, which a replay carries over
// (poison_replay.lua): poison_source_id names the entry that was poisoned, a replayed one after a replay.
const fieldFirstSource = "replayed_source_id"

// ageCheck returns what refuses a poison entry whose order is too old to replay, "" for one that is not:
// the worker keeps an order's outcome record OUTCOME_TTL from its decision, which came after the order was
// first published and before it was poisoned; once the record may have expired, a replay of an order that
// reached the stock would find no record and reserve it again. An entry is replayable while its order was
// first published less than OUTCOME_TTL ago, less the margin the worker keeps when it starts a group over
// (min(OUTCOME_TTL/10, 1m)), by the Redis server's clock, which wrote the ids. --force replays it all the same.
func (a *app) ageCheck(ctx context.Context) (func(candidate) string, error) {
	if a.opts.force {
		return func(candidate) string { return "" }, nil
	}
	now, err := a.rdb.Time(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("read the server's time: %w", err)
	}
	ttl := a.opts.outcomeTTL
	limit := ttl - min(ttl/10, time.Minute)
	return func(c candidate) string {
		first, id := firstPublished(c.fields)
		switch {
		case id == "":
			return "not replayable without --force: no " + fieldSourceID + " tells how old its order is"
		case now.Sub(first) >= limit:
			return fmt.Sprintf("not replayable without --force: its order was first published %s ago (entry %s), "+
				"and its outcome records expire OUTCOME_TTL (%s) after it was decided: a replay could reserve it again",
				human(now.Sub(first).Milliseconds()), id, ttl)
		}
		return ""
	}, nil
}

// firstPublished is when the entry's order was first published: the older of its source ids (the Redis
// clock's milliseconds), and that id; "" when neither is a stream id.
func firstPublished(fields map[string]any) (time.Time, string) {
	var first time.Time
	var firstID string
	for _, f := range []string{fieldSourceID, fieldFirstSource} {
		id, _ := fields[f].(string)
		ms, _, _ := strings.Cut(id, "-")
		n, err := strconv.ParseInt(ms, 10, 64)
		if !streamID.MatchString(id) || err != nil {
			continue
		}
		if t := time.UnixMilli(n); firstID == "" || t.Before(first) {
			first, firstID = t, id
		}
	}
	return first, firstID
}
