package redisstream

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

//go:embed commit.lua
var commitLua string

// CommitScript is commit.lua; load it (Load) where a commit met NOSCRIPT.
var CommitScript = redis.NewScript(commitLua)

// Commit publishes the outcome events of one partition's orders in one script call (commit.lua), for the
// entries still pending to Consumer only: a round that stalled past the claim idle time, its entries claimed
// by another consumer meanwhile, publishes nothing for them, so that what it decided cannot come after (and
// contradict) what the claimer published since, a cancel's outcome say. The entries are acked afterwards,
// by the router's ack of their messages (reader: one XACK per partition for many). A resend of the call
// after a lost reply finds its note (CommittedKey) and writes nothing again. Each event gets the producer
// span and trace context Publisher would give it.
type Commit struct {
	Orders, Results string // the partition's orders and results streams
	Group, Consumer string
	MaxLen          int64 // the results stream's approximate length cap; 0: none
	// Server is the address of the Redis it writes to (ServerAttributes); nil: unknown.
	Server []attribute.KeyValue
	args   []any
	lo, hi string // the least and the greatest entry id added
	spans  []trace.Span
	send   sendSpans
	cmd    *redis.Cmd
}

// otherPending bounds the consumer's other pending entries (its messages in flight, attempts it handed back)
// that the script's one look at its pending entries in the round's range of ids may meet besides the
// round's. An entry of the round past the bound is taken for settled elsewhere: not published, not acked,
// it is claimed and replayed later.
const otherPending = 10000

// Add adds the outcome event msg of the order read as entry id.
func (c *Commit) Add(id string, msg *message.Message) error {
	if c.send.name == "" {
		c.send = newSendSpans(c.Results, c.Server)
		c.args = []any{c.Group, c.Consumer, c.MaxLen, "", "", 0, commitRequests.next()}
		c.lo, c.hi = id, id
	}
	if idBefore(id, c.lo) {
		c.lo = id
	}
	if idBefore(c.hi, id) {
		c.hi = id
	}
	_, span := c.send.start(msg)
	values, err := entryValues(msg)
	if err != nil {
		Fail(span, err)
		span.End()
		return err
	}
	c.args = append(c.args, id, values[1], values[3], values[5])
	c.spans = append(c.spans, span)
	return nil
}

// Queue queues the script call on pipe (by its SHA: a Redis that does not know it answers NOSCRIPT, and End
// says so).
func (c *Commit) Queue(ctx context.Context, pipe redis.Pipeliner) {
	c.args[3], c.args[4], c.args[5] = c.lo, c.hi, len(c.spans)+otherPending
	c.cmd = CommitScript.EvalSha(ctx, pipe, []string{c.Orders, c.Results, CommittedKey(c.Orders, c.Group, c.Consumer)}, c.args...)
}

// CommittedKey is where commit.lua notes consumer's last call on stream (in its slot), for a call made again.
func CommittedKey(stream, group, consumer string) string {
	return stream + ":committed:" + group + ":" + consumer
}

// commitRequests numbers the commit calls of the process (their request ids).
var commitRequests = newRequestIDs()

// idBefore reports whether stream entry id a comes before b ("<ms>-<seq>"; an id that does not parse
// counts as 0-0).
func idBefore(a, b string) bool {
	am, as := parseID(a)
	bm, bs := parseID(b)
	return am < bm || am == bm && as < bs
}

func parseID(id string) (ms, seq uint64) {
	m, s, _ := strings.Cut(id, "-")
	ms, _ = strconv.ParseUint(m, 10, 64)
	seq, _ = strconv.ParseUint(s, 10, 64)
	return ms, seq
}

// End ends the events' spans once the pipeline was sent and reports, by the order of Add, which orders
// this consumer still owned (their events published); an error when the call failed
// (nothing was written: the script checks before it writes).
func (c *Commit) End() (owned []bool, err error) {
	defer func() {
		for _, span := range c.spans {
			if err != nil {
				Fail(span, err)
			}
			span.End()
		}
		c.spans = nil
	}()
	if err = c.cmd.Err(); err != nil {
		return nil, err
	}
	reply, ok := c.cmd.Val().([]any)
	if !ok || len(reply) != len(c.spans) {
		return nil, fmt.Errorf("redisstream: unexpected commit reply %.200v", c.cmd.Val())
	}
	owned = make([]bool, len(reply))
	for i, r := range reply {
		owned[i] = r == int64(1)
	}
	return owned, nil
}
