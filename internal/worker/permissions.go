package worker

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/delivery"
	"github.com/stockflow/stockflow/internal/hot"
	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/lockmw/rlock"
	"github.com/stockflow/stockflow/redisstream"
	"github.com/stockflow/stockflow/stock"
)

// errPermission stops a worker whose Redis user lacks a permission it needs: without the check it would
// start, and then fail every order.
var errPermission = errors.New("worker: missing Redis permission")

//go:embed permissions.lua
var permissionsLua string

var permissionsScript = redis.NewScript(permissionsLua)

// The probe's keys: of a SKU named "probe", in the layout of docs/formats.md. Checking a command does not
// run it.
var (
	probeStock   = stock.Key("probe")
	probeRecord  = inventory.OrderKey("probe", "probe")
	probeLock    = rlock.LockKey("probe")
	probeChannel = rlock.ChannelKey("probe")
	probeLatch   = "redisson_unlock_latch:" + probeLock + ":probe"
)

// checkPermissions asks each Redis whether the worker's user may run what the worker will run (its
// commands on its keys, streams and channels), before the first order: on REDIS_URL the streams, the stock
// and, without Redlock, the locks; on each Redlock master the locks (a master that does not answer is
// skipped, as Redlock tolerates a minority). It returns errPermission naming the first refusal.
func (w *Worker) checkPermissions(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	commands := w.streamCommands()
	if len(w.lockRDB) == 0 {
		commands = append(commands, lockCommands(w.cfg.Cluster)...)
	}
	err := eachMaster(ctx, w.rdb, func(ctx context.Context, c *redis.Client) error {
		return w.checkCommands(ctx, c, "REDIS_URL"+nodeName(w.rdb, c), commands)
	})
	if err != nil {
		return err
	}
	for _, c := range w.lockRDB {
		err := w.checkCommands(ctx, c, "REDLOCK_URLS master "+c.Options().Addr, lockCommands(false))
		if errors.Is(err, errPermission) {
			return err
		}
	}
	return nil
}

// checkCommands reports the first of commands that the user of c may not run.
func (w *Worker) checkCommands(ctx context.Context, c *redis.Client, which string, commands [][]string) error {
	argv := make([]any, len(commands))
	for i, cmd := range commands {
		argv[i] = strings.Join(cmd, "\n")
	}
	user := cmp.Or(c.Options().Username, "default")
	refused, err := permissionsScript.Run(ctx, c, nil, argv...).Int()
	switch {
	case redis.HasErrorPrefix(err, "NOPERM"):
		return fmt.Errorf("%w: %s user %q may not run scripts (EVALSHA, EVAL): %w", errPermission, which, user, err)
	case err != nil:
		return fmt.Errorf("%s: checking the user's permissions: %w", which, err)
	case refused < 0:
		w.logger.Warn("cannot check the Redis user's permissions (Redis before 7.0)", "redis", which)
	case refused > 0:
		return fmt.Errorf("%w: %s user %q may not run %s (NOPERM); give it the worker's ACL (deploy/users.acl)",
			errPermission, which, user, strings.Join(commands[refused-1], " "))
	}
	return nil
}

// streamCommands are the commands the worker runs on REDIS_URL besides the locks', with the keys they
// touch: the orders stream and its group (read, claim, ack, trim, poison), the results and poison streams
// (those of the first partition: the others' names differ only in their index), the stock hash and the
// outcome records (the stock scripts), and the fencing counter the stock script reads.
func (w *Worker) streamCommands() [][]string {
	p := w.parts[0]
	o, g := p.Orders, w.cfg.ConsumerGroup
	hotKey, hotStats := hot.Key(time.Unix(0, 0)), hot.StatsKey(time.Unix(0, 0))
	waits := delivery.WaitsKey(o, g)
	commands := [][]string{
		{"XREADGROUP", "GROUP", g, "probe", "COUNT", "1", "STREAMS", o, ">"},
		{"XCLAIM", o, g, "probe", "0", "0-1"}, {"XPENDING", o, g}, {"XACK", o, g, "0-1"},
		{"XDEL", o, "0-1"}, {"XTRIM", o, "MINID", "0"}, {"XLEN", o}, {"XRANGE", o, "-", "+"},
		{"XINFO", "GROUPS", o}, {"XGROUP", "CREATE", o, g, "$", "MKSTREAM"},
		// Watermill's subscribers delete the group's consumers idle for long with nothing pending, every 5 min.
		{"XINFO", "CONSUMERS", o, g}, {"XGROUP", "DELCONSUMER", o, g, "probe"},
		{"XADD", p.Results, "*", "payload", "probe"}, {"XADD", p.Poison, "*", "payload", "probe"},
		{"XTRIM", p.Results, "MAXLEN", "~", "1"}, // answer.lua trims the results once a call
		{"MULTI"}, {"EXEC"},
		{"HMGET", probeStock, "available"}, {"HGET", probeStock, "fence"}, {"HINCRBY", probeStock, "available", "1"},
		{"HSET", probeStock, "fence", "1"}, {"EXISTS", probeStock},
		{"GET", probeRecord}, {"SET", probeRecord, "probe"}, {"GET", rlock.TokenKey("probe")},
		{"SET", w.cfg.LayoutKey(), "1", "NX", "GET"},
		// What a read or claim handed over, for the call made again (fetch.lua); trimming's notes (trim.lua).
		{"GET", redisstream.FetchedKey(o, g, "read", "probe")}, {"SET", redisstream.FetchedKey(o, g, "read", "probe"), "probe"},
		{"ZADD", DeliveredTimesKey(o), "NX", "0", "0-1"}, {"ZRANGE", DeliveredTimesKey(o), "0", "-1"},
		{"ZREMRANGEBYSCORE", DeliveredTimesKey(o), "-inf", "0"}, {"PEXPIRE", DeliveredTimesKey(o), "1"},
		// When the cancels and fulfils waiting for earlier entries first asked (earlier.lua).
		{"TIME"}, {"HGET", waits, "probe"}, {"HSET", waits, "probe", "1"}, {"HDEL", waits, "probe"}, {"PEXPIRE", waits, "1"},
		// The hot-SKU windows (internal/hot's publish.lua).
		{"ZINCRBY", hotKey, "1", "probe"}, {"ZCARD", hotKey}, {"ZRANGE", hotKey, "0", "-1"}, {"ZREMRANGEBYRANK", hotKey, "0", "0"},
		{"HINCRBY", hotStats, "probe", "1"}, {"HGET", hotStats, "probe"}, {"HSET", hotStats, "probe", "1"},
		{"HDEL", hotStats, "probe"}, {"PEXPIRE", hotKey, "1"},
	}
	if w.cfg.KeyspaceEvents != "off" {
		// The live consumers, of which an idle worker hears its own partitions' events (live.lua), and the
		// backlog channel on which a busy worker asks the idle ones for help.
		live := redisstream.ConsumersKey(o, g)
		commands = append(commands, []string{"TIME"}, []string{"ZADD", live, "0", "probe"}, []string{"ZREM", live, "probe"},
			[]string{"ZREMRANGEBYSCORE", live, "-inf", "0"}, []string{"ZRANGE", live, "0", "-1"}, []string{"PEXPIRE", live, "1"},
			[]string{"SUBSCRIBE", redisstream.BacklogChannel(o, g)}, []string{"PUBLISH", redisstream.BacklogChannel(o, g), "backlog"})
	}
	if w.cfg.Cluster {
		// The cluster client's map of the slots, and its table of commands (to route them).
		commands = append(commands, []string{"CLUSTER", "SLOTS"}, []string{"COMMAND"})
	}
	if w.cfg.Replicas.Acks > 0 {
		commands = append(commands, []string{"WAIT", "1", "0"})
	}
	return commands
}

// lockCommands are the commands of the locks, where they live, with their keys and channel; sharded: the
// unlock messages of a cluster (SPUBLISH, SSUBSCRIBE).
func lockCommands(sharded bool) [][]string {
	token := rlock.TokenKey("probe")
	publish, subscribe := "PUBLISH", "SUBSCRIBE"
	if sharded {
		publish, subscribe = "SPUBLISH", "SSUBSCRIBE"
	}
	return [][]string{
		{"EXISTS", probeLock}, {"HEXISTS", probeLock, "probe"}, {"HINCRBY", probeLock, "probe", "1"},
		{"HSET", probeLock, "probe", "1"}, {"PEXPIRE", probeLock, "1"}, {"PTTL", probeLock}, {"DEL", probeLock},
		{"INCR", token}, {"GET", token}, {"SET", token, "1"}, {"PEXPIRE", token, "1"},
		{"GET", probeLatch}, {"SET", probeLatch, "1", "PX", "1"},
		{publish, probeChannel, "0"}, {subscribe, probeChannel},
		// The release script names the channel among its keys (as Redisson's does): the ACL checks it as a
		// key too.
		{"EVALSHA", strings.Repeat("0", 40), "3", probeLock, probeChannel, probeLatch},
	}
}
