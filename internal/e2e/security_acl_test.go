package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/lockmw/rlock"
	"github.com/stockflow/stockflow/testkit/clitest"
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
	survivor := startWorker(t, s, "acl-0", "REDIS_URL="+workerURL, "KEYSPACE_EVENTS=on", "STREAM_RETENTION=4s", "METRICS_ADDR="+addr)
	doomed := startWorker(t, s, "acl-1", "REDIS_URL="+workerURL, "KEYSPACE_EVENTS=on", "STREAM_RETENTION=4s")
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
	// The producer's user may not write stock: the stock is seeded as stockctl, as compose.yaml does.
	stockctlURL := userURL(t, s, "stockctl")
	_, prod := binaries(t)
	if code, out := runBinary(t, prod, []string{"REDIS_URL=" + stockctlURL}, "--orders", "0", "--skus", "5", "--seed-stock", "400"); code != 0 {
		t.Fatalf("seeding as the stockctl user: exit %d\n%s", code, out)
	}
	time.AfterFunc(time.Second, func() { _ = doomed.Signal(syscall.SIGKILL) })
	sum := produceEnv(t, []string{"REDIS_URL=" + producerURL}, "--orders", "3000", "--skus", "5", "--rate", "1500")
	assertConsistent(t, sum)
	if sum.Reserved != 2000 || sum.Rejected != 1000 {
		t.Errorf("reserved %d, rejected %d; want 2000 and 1000 (5 SKUs of 400)", sum.Reserved, sum.Rejected)
	}
	waitFor(t, 10*time.Second, "the bad and the oversized entry are poisoned", func() bool {
		return admin.XLen(ctx, "orders-poison").Val() == 2
	})

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

// The producer's user cannot take a lock (the commands each user may not run: security_users_test.go). A
// worker started with the producer's user stops at once, naming the permission it lacks, without showing
// the password.
func TestACLRefusesWhatAUserMayNot(t *testing.T) {
	s := startACLServer(t)
	ctx := context.Background()
	opts, _ := redis.ParseURL(userURL(t, s, "producer"))
	producerUser := redis.NewClient(opts)
	defer producerUser.Close()
	locker, err := rlock.NewReentrant(producerUser, rlock.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := locker.TryAcquire(ctx, "SKU-1"); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("the producer's user took a lock: %v", err)
	}

	_, password := composeCredentials(t, "producer")
	w := startWorker(t, s, "acl-wrong-user", "REDIS_URL="+userURL(t, s, "producer"))
	err, exited := w.exited(15 * time.Second)
	if !exited || err == nil {
		t.Fatalf("the worker with the producer's user: exited %v (%v), want a failure at start", exited, err)
	}
	// Every line is JSON: the password is looked for in the text and in the decoded values (which JSON may
	// escape), the refusal in the last line's err, as docs/security.md quotes it.
	log := w.logText()
	recs := clitest.JSONLines(t, log)
	if strings.Contains(log, password) || strings.Contains(fmt.Sprint(recs), password) {
		t.Errorf("the worker's output shows the password:\n%s", log)
	}
	clitest.Last(t, recs, "err", `missing Redis permission: REDIS_URL user "producer" may not run scripts (EVALSHA, EVAL): NOPERM`)

	// The same on a Redlock master: the worker's user on the stock Redis, the producer's on one master.
	masters := []string{userURL(t, startACLServer(t), "producer"), userURL(t, startACLServer(t), "worker"), userURL(t, startACLServer(t), "worker")}
	w = startWorker(t, s, "acl-wrong-master", "REDIS_URL="+userURL(t, s, "worker"), "REDLOCK_URLS="+strings.Join(masters, ","))
	if err, exited := w.exited(15 * time.Second); !exited || err == nil {
		t.Fatalf("the worker with the producer's user on a master: exited %v (%v), want a failure at start", exited, err)
	}
	last := clitest.Last(t, clitest.JSONLines(t, w.logText()), "err", "REDLOCK_URLS master")
	if msg, _ := last["err"].(string); !strings.Contains(msg, `user "producer" may not run`) {
		t.Errorf("the worker's last line names the master but not its user: %q", msg)
	}
}
