package e2e

import (
	"context"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/testkit/redistest"
)

// aclPasswords are the demo passwords of the users of deploy/users.acl, as compose.yaml gives them.
var aclPasswords = map[string]string{
	"worker": "worker-dev-password", "producer": "producer-dev-password", "stockctl": "stockctl-dev-password",
	"healthcheck": "healthcheck", "replica": "replica-dev-password", "clusteradmin": "clusteradmin-dev-password",
	"keda": "keda-dev-password",
}

// aclTry is a command a user tries: allowed (it may fail, but not for a permission), or refused.
type aclTry struct {
	args    []any
	allowed bool
}

func may(args ...any) aclTry    { return aclTry{args, true} }
func mayNot(args ...any) aclTry { return aclTry{args, false} }

// aclClaims are, by user, what docs/security.md says the user may do, and what it must not: every write
// and admin command beyond its role, scripts for the producer (a script that never ends blocks Redis for
// everyone), other keys and channels.
var aclClaims = map[string][]aclTry{
	"worker": {
		may("PING"), may("INFO", "memory"), may("EVAL", "return redis.call('HGET', KEYS[1], 'available')", 1, "stock:{A}"),
		may("SCRIPT", "LOAD", "return 1"), may("XREADGROUP", "GROUP", "inventory", "w", "COUNT", 1, "STREAMS", "orders", ">"),
		may("XACK", "orders", "inventory", "0-1"), may("XCLAIM", "orders", "inventory", "w", 0, "0-1"),
		may("XPENDING", "orders", "inventory"), may("XADD", "order-results", "*", "payload", "x"),
		may("XADD", "orders-poison", "*", "payload", "x"), may("XTRIM", "orders-poison", "MAXLEN", 1000),
		may("XDEL", "orders", "0-1"), may("XINFO", "GROUPS", "orders"), may("HINCRBY", "stock:{A}", "available", 0),
		may("SET", "order:{A}:o-1", "x"), may("PEXPIRE", "lock:{A}", 30000), may("INCR", "redisson_lock_token:lock:{A}"),
		may("PUBLISH", "redisson_lock__channel:lock:{A}", 0), may("SUBSCRIBE", "redisson_lock__channel:lock:{A}"),
		may("SET", "redisson_unlock_latch:lock:{A}:r", 1), may("SPUBLISH", "redisson_lock__channel:lock:{A}", 0),
		may("WAIT", 0, 0), may("CLUSTER", "SLOTS"), may("ZADD", "orders:consumers:inventory", 1, "w"),
		may("ZREMRANGEBYSCORE", "orders:consumers:inventory", "-inf", 0), may("ZREM", "orders:consumers:inventory", "w"),
		may("ZRANGE", "orders:consumers:inventory", 0, -1), may("PEXPIRE", "orders:consumers:inventory", 20000), may("TIME"),
		may("PUBLISH", "orders:backlog:inventory", "backlog"), may("SUBSCRIBE", "orders:{0}:backlog:inventory"),
		mayNot("FLUSHALL"), mayNot("CONFIG", "GET", "requirepass"), mayNot("CONFIG", "SET", "busy-reply-threshold", 0),
		mayNot("ACL", "LIST"), mayNot("KEYS", "*"), mayNot("CLIENT", "LIST"), mayNot("GET", "session:1"),
		mayNot("DEL", "session:1"), mayNot("EVAL", "return redis.call('GET', KEYS[1])", 1, "session:1"),
		mayNot("EVAL", "return redis.call('GET', 'session:1')", 0), mayNot("SCRIPT", "FLUSH"), mayNot("SCRIPT", "KILL"),
		mayNot("FCALL", "f", 0), mayNot("SUBSCRIBE", "other"), mayNot("PUBLISH", "other", 0),
	},
	"producer": {
		may("PING"), may("XADD", "orders", "*", "payload", "x"), may("XADD", "orders:{1}", "*", "payload", "x"),
		may("XLEN", "orders"), may("XGROUP", "CREATE", "orders", "inventory", "$", "MKSTREAM"),
		may("XREVRANGE", "order-results", "+", "-", "COUNT", 1), may("XREAD", "COUNT", 1, "STREAMS", "order-results", "orders-poison", 0, 0),
		may("HMGET", "stock:{A}", "available", "reserved"), may("GET", "orders:partitions"), may("SET", "orders:partitions", 1),
		may("WAIT", 0, 0), may("COMMAND", "COUNT"), may("CLUSTER", "SLOTS"),
		// What ACLs cannot refuse: XADD's arguments (docs/security.md, the producers' trust boundary).
		may("XADD", "orders", "MAXLEN", 0, "*", "payload", "x"), may("XADD", "orders", "MINID", "9999999999999", "*", "payload", "x"),
		mayNot("EVAL", "return 1", 0), mayNot("EVALSHA", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", 0),
		mayNot("EVAL_RO", "return 1", 0), mayNot("FCALL", "f", 0), mayNot("SCRIPT", "LOAD", "return 1"),
		mayNot("SCRIPT", "KILL"), mayNot("FUNCTION", "KILL"), mayNot("FLUSHALL"),
		mayNot("CONFIG", "SET", "maxmemory-policy", "allkeys-lru"), mayNot("INFO"), mayNot("KEYS", "*"),
		mayNot("DEL", "stock:{A}"), mayNot("HSET", "stock:{A}", "available", 1000000), mayNot("HSETNX", "stock:{A}", "x", 1),
		mayNot("HINCRBY", "stock:{A}", "available", 1), mayNot("SET", "stock:{A}:latch:r", 1),
		mayNot("XADD", "order-results", "*", "payload", "forged"), mayNot("XADD", "orders-poison", "*", "payload", "x"),
		mayNot("XREADGROUP", "GROUP", "inventory", "c", "STREAMS", "orders", ">"), mayNot("XACK", "orders", "inventory", "0-1"),
		mayNot("XDEL", "orders", "0-1"), mayNot("XTRIM", "orders", "MAXLEN", 0), mayNot("XGROUP", "DESTROY", "orders", "inventory"),
		mayNot("XGROUP", "SETID", "orders", "inventory", "$"), mayNot("DEL", "orders"), mayNot("SET", "orders", "x"),
		mayNot("SET", "order:{A}:o-1", "forged"), mayNot("HGETALL", "lock:{A}"), mayNot("HSET", "lock:{A}", "me", 1),
		mayNot("PUBLISH", "redisson_lock__channel:lock:{A}", 0), mayNot("SUBSCRIBE", "redisson_lock__channel:lock:{A}"),
	},
	"stockctl": {
		may("PING"), may("EVAL", "return redis.call('HGET', KEYS[1], 'available')", 1, "stock:{A}"), may("HGETALL", "stock:{A}"),
		may("HSET", "stock:{A}", "available", 10), may("HINCRBY", "stock:{A}", "available", 1), may("SET", "stock:{A}:latch:r", 1),
		may("HGETALL", "lock:{A}"), may("PTTL", "lock:{A}"), may("GET", "redisson_lock_token:lock:{A}"), may("TIME"),
		may("XLEN", "orders"), may("XRANGE", "orders-poison", "-", "+"), may("XREVRANGE", "orders-poison", "+", "-"),
		may("XPENDING", "orders", "inventory"), may("XINFO", "GROUPS", "orders"), may("XINFO", "CONSUMERS", "orders", "inventory"),
		may("XADD", "orders", "*", "payload", "x"), may("XDEL", "orders-poison", "0-1"),
		may("SET", "orders-poison:replay-latch:r", 1), may("XGROUP", "DELCONSUMER", "orders", "inventory", "nobody"),
		may("SCRIPT", "KILL"), may("FUNCTION", "KILL"),
		mayNot("FLUSHALL"), mayNot("CONFIG", "SET", "busy-reply-threshold", 0), mayNot("ACL", "LIST"), mayNot("KEYS", "*"),
		mayNot("SCRIPT", "FLUSH"), mayNot("DEL", "stock:{A}"), mayNot("HSET", "lock:{A}", "me", 1), mayNot("DEL", "lock:{A}"),
		mayNot("PEXPIRE", "lock:{A}", 1), mayNot("INCR", "redisson_lock_token:lock:{A}"),
		mayNot("EVAL", "return redis.call('HSET', KEYS[1], 'me', 1)", 1, "lock:{A}"),
		mayNot("XREADGROUP", "GROUP", "inventory", "c", "STREAMS", "orders", ">"), mayNot("XACK", "orders", "inventory", "0-1"),
		mayNot("XADD", "order-results", "*", "payload", "forged"), mayNot("GET", "session:1"),
	},
	"healthcheck": {
		may("PING"),
		mayNot("INFO"), mayNot("GET", "session:1"), mayNot("CONFIG", "GET", "*"), mayNot("FLUSHALL"), mayNot("CLIENT", "LIST"),
	},
	"replica": {
		may("PING"), may("REPLCONF", "listening-port", 6380),
		mayNot("GET", "session:1"), mayNot("SET", "session:1", "x"), mayNot("FLUSHALL"), mayNot("INFO"),
		mayNot("CONFIG", "SET", "masterauth", "x"),
	},
	"clusteradmin": {
		may("PING"), may("INFO"), may("CLUSTER", "INFO"),
		mayNot("GET", "stock:{A}"), mayNot("HSET", "stock:{A}", "available", 1), mayNot("FLUSHALL"),
		mayNot("CONFIG", "SET", "busy-reply-threshold", 0), mayNot("EVAL", "return 1", 0),
	},
	// KEDA's Redis Streams scaler (deploy/kubernetes/scaledobject.yaml): the group's lag, which it reads only
	// after INFO shows Redis 7, and XLEN while the group does not exist.
	"keda": {
		may("PING"), may("INFO"), may("XINFO", "GROUPS", "orders"), may("XLEN", "orders"), may("XLEN", "orders:{3}"),
		may("CLUSTER", "SLOTS"),
		mayNot("XRANGE", "orders", "-", "+"), mayNot("XADD", "orders", "*", "payload", "x"), mayNot("XPENDING", "orders", "inventory"),
		mayNot("XREADGROUP", "GROUP", "inventory", "w", "COUNT", 1, "STREAMS", "orders", ">"), mayNot("XLEN", "order-results"),
		mayNot("HGET", "stock:{A}", "available"), mayNot("FLUSHALL"), mayNot("CONFIG", "GET", "requirepass"), mayNot("EVAL", "return 1", 0),
	},
}

// Each user of deploy/users.acl, logged in with its demo password, may run what docs/security.md says it
// may, and is refused (NOPERM, or the ACL error of a command inside a script) everything the claims list
// beyond it; the default user is off. Every user of the file has claims here.
func TestACLEachUserMayDoWhatTheDocsSayAndNoMore(t *testing.T) {
	s := startACLServer(t)
	seedACLKeys(t, s.Client())
	users := readACL(t)
	for name := range users {
		if _, ok := aclClaims[name]; !ok && name != "default" {
			t.Errorf("user %s of %s has no claims in this test", name, aclFile)
		}
	}
	ctx := context.Background()
	for _, name := range slices.Sorted(maps.Keys(aclClaims)) {
		t.Run(name, func(t *testing.T) {
			// Not tried for real: a user that may would stop the test's server.
			if reply, err := s.Client().Do(ctx, "ACL", "DRYRUN", name, "SHUTDOWN", "NOSAVE").Text(); err != nil || reply == "OK" {
				t.Errorf("ACL DRYRUN %s SHUTDOWN NOSAVE: %q, %v; want it refused", name, reply, err)
			}
			if !users[name].accepts(aclPasswords[name]) {
				t.Fatalf("%s does not accept the demo password of %s", aclFile, name)
			}
			rdb := loginAs(t, s, name)
			for _, c := range aclClaims[name] {
				err := tryCommand(rdb, c.args)
				if refused := aclRefused(err); refused == c.allowed {
					t.Errorf("%s ran %v: %v; want it %s", name, c.args, err, map[bool]string{true: "allowed", false: "refused"}[c.allowed])
				}
			}
		})
	}
	anonymous := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer anonymous.Close()
	if err := anonymous.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("a client without a user: %v, want NOAUTH", err)
	}
	if err := anonymous.Do(ctx, "AUTH", "default", "").Err(); err == nil {
		t.Error("the default user logged in")
	}
}

// The producers' trust boundary (docs/security.md): ACLs grant XADD, not its arguments. As producer,
// MAXLEN 0 deletes an entry a worker holds pending, and an explicit id at the top of the id space stops
// every later XADD of the stream, whoever sends it.
func TestACLProducerMayDeleteOrExhaustTheStream(t *testing.T) {
	s := startACLServer(t)
	admin, producerUser := s.Client(), loginAs(t, s, "producer")
	ctx := context.Background()
	seedACLKeys(t, admin)
	if err := admin.XAdd(ctx, &redis.XAddArgs{Stream: "orders", Values: []string{"payload", "o-1"}}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "inventory", Consumer: "w", Streams: []string{"orders", ">"}}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := producerUser.Do(ctx, "XADD", "orders", "MAXLEN", 0, "*", "payload", "x").Err(); err != nil {
		t.Fatalf("XADD MAXLEN 0 as producer: %v", err)
	}
	pending, err := admin.XPending(ctx, "orders", "inventory").Result()
	if n := admin.XLen(ctx, "orders").Val(); err != nil || n != 0 || pending.Count != 1 {
		t.Errorf("after XADD MAXLEN 0: %d entries, %+v pending (%v); want the pending entry deleted", n, pending, err)
	}

	max := &redis.XAddArgs{Stream: "orders:{9}", ID: "18446744073709551615-18446744073709551615", Values: []string{"payload", "x"}}
	if err := producerUser.XAdd(ctx, max).Err(); err != nil {
		t.Fatalf("XADD with the last possible id as producer: %v", err)
	}
	err = loginAs(t, s, "stockctl").XAdd(ctx, &redis.XAddArgs{Stream: "orders:{9}", Values: []string{"payload", "x"}}).Err()
	if err == nil || !strings.Contains(err.Error(), "exhausted the last possible ID") {
		t.Errorf("XADD * after the last possible id: %v, want the stream exhausted", err)
	}
}

// A script that never ends (any user that may EVAL can send one: the worker's here) makes Redis answer
// BUSY to everyone; the stockctl user may kill it once busy-reply-threshold has passed, the producer's
// and the worker's may not, and Redis answers again.
func TestACLStockctlUserKillsARunawayScript(t *testing.T) {
	s := startACLServer(t)
	ctx := context.Background()
	if err := s.Client().ConfigSet(ctx, "busy-reply-threshold", "100").Err(); err != nil {
		t.Fatal(err)
	}
	operator, producerUser, workerUser := loginAs(t, s, "stockctl"), loginAs(t, s, "producer"), loginAs(t, s, "worker")
	looper := loginAs(t, s, "worker")
	for _, c := range []*redis.Client{operator, producerUser, workerUser, looper} {
		if err := c.Ping(ctx).Err(); err != nil { // connected before Redis is busy
			t.Fatal(err)
		}
	}
	runaway := make(chan error, 1)
	go func() { runaway <- looper.Eval(ctx, "while true do end", nil).Err() }()
	// SCRIPT KILL before the script started says NOTBUSY; once it runs, Redis takes the kill after the
	// threshold.
	var err error
	for err = operator.ScriptKill(ctx).Err(); err != nil && strings.Contains(err.Error(), "NOTBUSY"); err = operator.ScriptKill(ctx).Err() {
	}
	if err != nil {
		t.Fatalf("SCRIPT KILL as stockctl: %v", err)
	}
	if err := <-runaway; err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("the runaway script ended with %v, want killed", err)
	}
	if err := producerUser.Ping(ctx).Err(); err != nil {
		t.Errorf("Redis after the kill: %v", err)
	}
	for _, c := range []*redis.Client{producerUser, workerUser} {
		if err := c.ScriptKill(ctx).Err(); !aclRefused(err) {
			t.Errorf("SCRIPT KILL as %s: %v, want NOPERM", c.Options().Username, err)
		}
	}
}

// docs/security.md shows deploy/users.acl as it is, but for the password hashes.
func TestDocsShowTheShippedACLFile(t *testing.T) {
	file := regexp.MustCompile(`#[0-9a-f]{64}`).ReplaceAllString(repoFile(t, "deploy/users.acl"), "#<sha256 of the password>")
	block := regexp.MustCompile("(?s)```text\n(user default off\n.*?)```").FindStringSubmatch(doc(t, "security.md"))
	if block == nil || strings.TrimSpace(block[1]) != strings.TrimSpace(file) {
		t.Errorf("docs/security.md does not show %s as it is (hashes as #<sha256 of the password>); want\n%s", aclFile, file)
	}
}

// seedACLKeys writes, as the admin, the keys the claims touch: a SKU's stock and lock, the group, a poison
// entry and a key of another application.
func seedACLKeys(t *testing.T, admin *redis.Client) {
	t.Helper()
	ctx := context.Background()
	for _, args := range [][]any{
		{"HSET", "stock:{A}", "available", 10, "reserved", 0}, {"HSET", "lock:{A}", "someone", 1},
		{"SET", "redisson_lock_token:lock:{A}", 3}, {"XGROUP", "CREATE", "orders", "inventory", "$", "MKSTREAM"},
		{"XADD", "orders-poison", "*", "payload", "x"}, {"SET", "session:1", "secret"},
	} {
		if err := admin.Do(ctx, args...).Err(); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
	}
}

// loginAs is a client of s logged in as user of deploy/users.acl, with its demo password.
func loginAs(t *testing.T, s *redistest.Server, user string) *redis.Client {
	t.Helper()
	u, err := url.Parse(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(user, aclPasswords[user])
	opts, err := redis.ParseURL(u.String())
	if err != nil {
		t.Fatal(err)
	}
	opts.MaxRetries = -1
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// tryCommand runs args; a SUBSCRIBE on a connection of its own, until Redis confirms or refuses it.
func tryCommand(rdb *redis.Client, args []any) error {
	ctx := context.Background()
	if args[0] != "SUBSCRIBE" {
		return rdb.Do(ctx, args...).Err()
	}
	sub := rdb.Subscribe(ctx)
	defer sub.Close()
	if err := sub.Subscribe(ctx, args[1].(string)); err != nil {
		return err
	}
	_, err := sub.Receive(ctx)
	return err
}

// aclRefused: Redis refused the command for a permission, itself or one it ran inside a script.
func aclRefused(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "NOPERM") || strings.Contains(err.Error(), "can't access"))
}
