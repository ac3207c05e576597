package demo

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
	"github.com/redis/go-redis/v9"
)

// The embedded Redis is miniredis (v2.40.0) with two of its gaps closed, so the workers run on it as on
// redis-server:
//   - Its XCLAIM ignores the min-idle-time and claims any pending entry. When an order was handed back for a
//     retry, every consumer whose claim round saw it idle claimed it: several ran it at once, each claim
//     counted a delivery, and past MAX_ATTEMPTS it was poisoned while another consumer decided it. Here
//     an XCLAIM claims only the entries idle for its min-idle-time, checked and claimed in one step.
//   - It runs a blocking XREAD again after every command of any client, scanning the whole stream under
//     the lock all clients wait for: the producer's wait for outcomes took half of the demo's time. Here a
//     blocking XREAD polls, and reads again only when one of its streams changed.
//
// checkClaims refuses the embedded Redis when the first does not hold. Keys with a TTL (lock leases,
// outcome records) never expire on miniredis; nothing in the demo waits for one to.

// readPoll is how often a blocking XREAD on the embedded Redis looks whether its streams changed.
const readPoll = 10 * time.Millisecond

// claimInScript runs an XCLAIM (ARGV) inside a script, where embedded.claim checks its min-idle-time and
// claims in one step.
const claimInScript = "return redis.call('XCLAIM', unpack(ARGV))"

// startEmbedded starts an in-process miniredis, with its XCLAIM and blocking XREAD mended.
func startEmbedded(out io.Writer) (url string, stop func(), err error) {
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return "", nil, err
	}
	e := &embedded{srv: m.Server(), done: make(chan struct{})}
	m.Server().SetPreHook(e.hook)
	stop = func() { close(e.done); m.Close() }
	url = "redis://" + m.Addr() + "/0"
	if err := checkClaims(context.Background(), url); err != nil {
		stop()
		return "", nil, fmt.Errorf("the embedded Redis (miniredis) cannot run the workers: %w; "+
			"install redis-server (apt-get install redis-server, brew install redis) or set REDIS_URL", err)
	}
	fmt.Fprintf(out, "Redis: embedded in-process miniredis at %s (no redis-server needed)\n", url)
	return url, stop, nil
}

// embedded mends commands of a miniredis server before it runs them.
type embedded struct {
	srv  *server.Server
	done chan struct{} // closed when the server stops: ends the blocking reads
}

// hook is the server's pre-hook: it answers the commands it mends and reports true, or leaves the command
// to miniredis.
func (e *embedded) hook(c *server.Peer, cmd string, args ...string) bool {
	switch cmd {
	case "XCLAIM":
		return e.claim(c, args)
	case "XREAD":
		return e.read(c, args)
	}
	return false
}

// claim runs an XCLAIM with a min-idle-time as Redis does: an entry idle for less is not claimed. Outside
// a script it runs the XCLAIM in one, so that the check and the claim are one step there too.
func (e *embedded) claim(c *server.Peer, args []string) bool {
	if len(args) < 5 {
		return false
	}
	minIdle, err := strconv.ParseInt(args[3], 10, 64)
	ids, opts := claimIDs(args[4:])
	if err != nil || minIdle <= 0 || hasWord(opts, "FORCE") {
		return false // nothing to check, an error for miniredis to tell, or entries to create
	}
	if nested, _ := connState(c); !nested {
		e.srv.Dispatch(c, append([]string{"EVAL", claimInScript, "0"}, args...))
		return true
	}
	var idle []string
	for _, id := range ids {
		ms, err := e.idle(c, args[0], args[1], id)
		if err != nil {
			c.WriteError(err.Error())
			return true
		}
		if ms >= minIdle {
			idle = append(idle, id)
		}
	}
	if len(idle) == 0 {
		c.WriteLen(0)
		return true
	}
	e.srv.Dispatch(c, slices.Concat([]string{"XCLAIM"}, args[:3], []string{"0"}, idle, opts))
	return true
}

// claimIDs splits the arguments of XCLAIM after its min-idle-time into the entry ids and the options.
func claimIDs(args []string) (ids, opts []string) {
	i := slices.IndexFunc(args, func(a string) bool {
		return slices.Contains([]string{"IDLE", "TIME", "RETRYCOUNT", "FORCE", "JUSTID", "LASTID"}, strings.ToUpper(a))
	})
	if i < 0 {
		return args, nil
	}
	return args[:i], args[i:]
}

// idle returns for how many milliseconds entry id of stream key has been pending in group, -1 when it is
// not pending.
func (e *embedded) idle(c *server.Peer, key, group, id string) (int64, error) {
	reply, err := e.call(c, "XPENDING", key, group, id, id, "1")
	if err != nil {
		return 0, err
	}
	rows, _ := reply.([]any)
	if len(rows) == 0 {
		return -1, nil
	}
	if row, _ := rows[0].([]any); len(row) == 4 {
		if ms, ok := row[2].(int); ok {
			return int64(ms), nil
		}
	}
	return 0, fmt.Errorf("ERR unexpected XPENDING reply %v", rows[0])
}

// read answers a blocking XREAD by polling: it scans the streams again only when one of them changed.
// Reads inside a script or a MULTI, without BLOCK, or from "$" or "+" are miniredis' own.
func (e *embedded) read(c *server.Peer, args []string) bool {
	streams, block, timeout, ok := blockingRead(args)
	if nested, queuing := connState(c); !ok || nested || queuing {
		return false
	}
	once := slices.Concat([]string{"XREAD"}, args[:block], args[block+2:]) // without BLOCK <ms>
	var deadline <-chan time.Time
	if timeout > 0 {
		deadline = time.After(timeout)
	}
	var seen string
	for {
		if now := e.version(c, streams); now != seen {
			seen = now
			if reply := e.raw(c, once); !strings.HasPrefix(reply, "*-1") {
				c.WriteRaw(reply)
				return true
			}
		}
		select {
		case <-deadline:
			c.WriteRaw(e.raw(c, once))
			return true
		case <-e.done:
			c.WriteLen(-1)
			return true
		case <-time.After(readPoll):
		}
		if c.Closed() {
			return true
		}
	}
}

// blockingRead finds the streams of an XREAD, the index of its BLOCK argument and its timeout (0: none);
// ok is false unless it blocks on explicit ids.
func blockingRead(args []string) (streams []string, block int, timeout time.Duration, ok bool) {
	block = slices.IndexFunc(args, func(a string) bool { return strings.EqualFold(a, "BLOCK") })
	from := slices.IndexFunc(args, func(a string) bool { return strings.EqualFold(a, "STREAMS") })
	if block < 0 || from < 0 || block > from || (len(args)-from-1)%2 != 0 {
		return nil, 0, 0, false
	}
	ms, err := strconv.Atoi(args[block+1])
	keys := args[from+1:]
	streams, ids := keys[:len(keys)/2], keys[len(keys)/2:]
	if err != nil || ms < 0 || slices.Contains(ids, "$") || slices.Contains(ids, "+") {
		return nil, 0, 0, false
	}
	return streams, block, time.Duration(ms) * time.Millisecond, true
}

// version tells whether the streams changed: it changes with their lengths and last ids.
func (e *embedded) version(c *server.Peer, streams []string) string {
	var v strings.Builder
	for _, s := range streams {
		v.WriteString(e.raw(c, []string{"XINFO", "STREAM", s}))
	}
	return v.String()
}

// raw runs a command for c and returns its reply as sent.
func (e *embedded) raw(c *server.Peer, args []string) string {
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	p := server.NewPeer(w)
	p.Ctx, p.Resp3 = c.Ctx, c.Resp3
	e.srv.Dispatch(p, args)
	w.Flush()
	return buf.String()
}

// call runs a command for c (in its database, inside its script) and returns its reply, decoded.
func (e *embedded) call(c *server.Peer, args ...string) (any, error) {
	return server.ParseReply(bufio.NewReader(strings.NewReader(e.raw(c, args))))
}

// connState reads two fields of miniredis' unexported connection state: whether c is a script's call, and
// whether it is queuing a MULTI. Should another version of miniredis lack them, both are false, and
// checkClaims refuses the Redis if its claims break.
func connState(c *server.Peer) (nested, queuing bool) {
	v := reflect.ValueOf(c.Ctx)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return false, false
	}
	if f := v.Elem().FieldByName("nested"); f.Kind() == reflect.Bool {
		nested = f.Bool()
	}
	if f := v.Elem().FieldByName("transaction"); f.Kind() == reflect.Slice {
		queuing = !f.IsNil()
	}
	return nested, queuing
}

// hasWord tells whether word is among args, in any case.
func hasWord(args []string, word string) bool {
	return slices.ContainsFunc(args, func(a string) bool { return strings.EqualFold(a, word) })
}

// claimCheckKey is the stream checkClaims uses, and deletes.
const claimCheckKey = "stockflow-demo:claim-check"

// errClaims is what checkClaims finds wrong.
var errClaims = errors.New("its XCLAIM does not honour the min-idle-time")

// checkClaims tells whether XCLAIM with a min-idle-time claims exactly the entries idle that long, sent by
// a client and by a script, on the Redis at url.
func checkClaims(ctx context.Context, url string) error {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return err
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	defer rdb.Del(context.WithoutCancel(ctx), claimCheckKey)
	id, err := pendingEntry(ctx, rdb)
	if err != nil {
		return err
	}
	for _, idle := range []int64{0, 120_000} {
		for _, via := range []string{"a client", "a script"} {
			// Consumer a holds the entry, idle for idle ms; b claims it if it has been idle for a minute.
			if err := rdb.Do(ctx, "XCLAIM", claimCheckKey, "check", "a", 0, id, "IDLE", idle, "JUSTID").Err(); err != nil {
				return err
			}
			claim := []any{claimCheckKey, "check", "b", 60_000, id, "JUSTID"}
			var cmd *redis.Cmd
			if via == "a script" {
				cmd = rdb.Eval(ctx, claimInScript, nil, claim...)
			} else {
				cmd = rdb.Do(ctx, append([]any{"XCLAIM"}, claim...)...)
			}
			claimed, err := cmd.Slice()
			if err != nil {
				return err
			}
			if len(claimed) == 1 != (idle >= 60_000) {
				return fmt.Errorf("%w: XCLAIM from %s with a min-idle-time of 60000 ms claimed %d entries idle for %d ms",
					errClaims, via, len(claimed), idle)
			}
		}
	}
	return nil
}

// pendingEntry adds an entry to a new stream claimCheckKey and delivers it to consumer a of group check.
func pendingEntry(ctx context.Context, rdb *redis.Client) (string, error) {
	if err := rdb.Del(ctx, claimCheckKey).Err(); err != nil {
		return "", err
	}
	if err := rdb.XGroupCreateMkStream(ctx, claimCheckKey, "check", "$").Err(); err != nil {
		return "", err
	}
	id, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: claimCheckKey, Values: []string{"f", "v"}}).Result()
	if err != nil {
		return "", err
	}
	return id, rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "check", Consumer: "a", Streams: []string{claimCheckKey, ">"}, Count: 1}).Err()
}
