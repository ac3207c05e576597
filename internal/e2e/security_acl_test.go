package e2e

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/lockmw/rlock"
)

// The workers, the producer and stockctl run with the least-privilege users of deploy/users.acl, as
// compose.yaml configures them (same users, same passwords), through what their code does beyond the happy
// path: readiness (INFO, XINFO), a bad and an oversized entry (poisoned), a worker killed mid-run (its
// orders claimed), trimming, and every stockctl command. The stock adds up, and Redis refused nothing:
// ACL LOG stays empty (Redis 7 checks the keys of scripts and of the commands inside them too).
func TestACLUsersRunThePipeline(t *testing.T) {
	s := startACLServer(t)
	admin := s.Client()
	workerURL, producerURL := userURL(t, s, "worker"), userURL(t, s, "producer")
	addr := freeAddr(t)
	survivor := startWorker(t, s, "acl-0", "REDIS_URL="+workerURL, "STREAM_RETENTION=4s", "METRICS_ADDR="+addr)
	doomed := startWorker(t, s, "acl-1", "REDIS_URL="+workerURL, "STREAM_RETENTION=4s")
	waitFor(t, 10*time.Second, "the worker is ready", func() bool { c, _ := readyz(addr); return c == 200 })

	producerOpts, _ := redis.ParseURL(producerURL)
	publisher := redis.NewClient(producerOpts)
	defer publisher.Close()
	ctx := context.Background()
	for _, payload := range []string{"not json", strings.Repeat("x", 90_000)} {
		if err := publisher.XAdd(ctx, &redis.XAddArgs{Stream: "orders", Values: []string{"payload", payload}}).Err(); err != nil {
			t.Fatalf("XADD as the producer user: %v", err)
		}
	}
	time.AfterFunc(time.Second, func() { _ = doomed.Signal(syscall.SIGKILL) })
	sum := produceEnv(t, []string{"REDIS_URL=" + producerURL}, "--orders", "3000", "--skus", "5", "--seed-stock", "400", "--rate", "1500")
	assertConsistent(t, sum)
	waitFor(t, 10*time.Second, "the bad and the oversized entry are poisoned", func() bool {
		return admin.XLen(ctx, "orders-poison").Val() == 2
	})

	stockctlURL := userURL(t, s, "stockctl")
	for _, args := range [][]string{
		{"stock", "SKU-1"}, {"stock", "add", "SKU-1", "1"}, {"stock", "set", "SKU-9", "5"}, {"lock", "SKU-1"},
		{"pending"}, {"poison", "list"}, {"poison", "replay", "--all", "--dry-run"},
		{"poison", "replay", "--reason-contains", "bad input"}, {"consumers", "prune", "--idle", "0s"},
	} {
		if code, out, errOut := runStockctl(t, stockctlURL, args...); code != 0 {
			t.Errorf("stockctl %v as the stockctl user: exit %d\n%s%s", args, code, out, errOut)
		}
	}
	// The replayed entry went back to orders (with replayed_from) and a worker poisoned it again.
	waitFor(t, 10*time.Second, "the replayed entry is poisoned again", func() bool {
		entries, _ := admin.XRange(ctx, "orders-poison", "-", "+").Result()
		return len(entries) == 2 && entries[1].Values["replayed_from"] != nil
	})
	if denied := aclDenials(t, admin); len(denied) > 0 {
		t.Fatalf("Redis refused a user %d time(s); ACL LOG:\n%v", len(denied), denied)
	}
	if _, password := composeCredentials(t, "worker"); strings.Contains(survivor.logText(), password) {
		t.Errorf("the worker logged its password:\n%s", survivor.logText())
	}
}

// What a user may not do fails with NOPERM: the producer's user cannot take a lock, consume or ack orders,
// write outcome records, flush or reconfigure Redis; the worker's cannot either of the last two, nor read
// other keys; no one gets in without a user. A worker started with the producer's user stops at once, naming
// the permission it lacks, without showing the password.
func TestACLRefusesWhatAUserMayNot(t *testing.T) {
	s := startACLServer(t)
	ctx := context.Background()
	client := func(service string) *redis.Client {
		opts, _ := redis.ParseURL(userURL(t, s, service))
		c := redis.NewClient(opts)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	producerUser, workerUser := client("producer"), client("worker")
	locker, err := rlock.NewReentrant(producerUser, rlock.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := locker.TryAcquire(ctx, "SKU-1"); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("the producer's user took a lock: %v", err)
	}
	for _, c := range []struct {
		who  string
		rdb  *redis.Client
		args []any
	}{
		{"producer", producerUser, []any{"FLUSHALL"}},
		{"producer", producerUser, []any{"CONFIG", "SET", "maxmemory-policy", "allkeys-lru"}},
		{"producer", producerUser, []any{"XREADGROUP", "GROUP", "inventory", "c", "STREAMS", "orders", ">"}},
		{"producer", producerUser, []any{"XACK", "orders", "inventory", "0-1"}},
		{"producer", producerUser, []any{"SET", "order:{SKU-1}:o-1", "forged"}},
		{"producer", producerUser, []any{"DEL", "stock:{SKU-1}"}},
		{"producer", producerUser, []any{"EVAL", "return redis.call('HSET', KEYS[1], 'x', 1)", "1", "lock:{SKU-1}"}},
		{"worker", workerUser, []any{"FLUSHALL"}},
		{"worker", workerUser, []any{"CONFIG", "GET", "requirepass"}},
		{"worker", workerUser, []any{"ACL", "LIST"}},
		{"worker", workerUser, []any{"KEYS", "*"}},
		{"worker", workerUser, []any{"GET", "session:1"}},
	} {
		if err := c.rdb.Do(ctx, c.args...).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("the %s's user ran %v: %v, want NOPERM", c.who, c.args, err)
		}
	}
	anonymous := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer anonymous.Close()
	if err := anonymous.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("a client without a user: %v, want NOAUTH", err)
	}

	_, password := composeCredentials(t, "producer")
	w := startWorker(t, s, "acl-wrong-user", "REDIS_URL="+userURL(t, s, "producer"))
	err, exited := w.exited(15 * time.Second)
	if !exited || err == nil {
		t.Fatalf("the worker with the producer's user: exited %v (%v), want a failure at start", exited, err)
	}
	log := w.logText()
	for _, want := range []string{"missing Redis permission", `REDIS_URL user "producer" may not run XREADGROUP`, "NOPERM"} {
		if !strings.Contains(log, want) {
			t.Errorf("the worker's output lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, password) {
		t.Errorf("the worker's output shows the password:\n%s", log)
	}

	// The same on a Redlock master: the worker's user on the stock Redis, the producer's on one master.
	masters := []string{userURL(t, startACLServer(t), "producer"), userURL(t, startACLServer(t), "worker"), userURL(t, startACLServer(t), "worker")}
	w = startWorker(t, s, "acl-wrong-master", "REDIS_URL="+userURL(t, s, "worker"), "REDLOCK_URLS="+strings.Join(masters, ","))
	if err, exited := w.exited(15 * time.Second); !exited || err == nil {
		t.Fatalf("the worker with the producer's user on a master: exited %v (%v), want a failure at start", exited, err)
	}
	if log := w.logText(); !strings.Contains(log, "REDLOCK_URLS master") || !strings.Contains(log, `user "producer" may not run`) {
		t.Errorf("the worker's output does not name the master and its user:\n%s", log)
	}
}
