package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// errNotDurable refuses a stock Redis that may lose acknowledged writes on a crash (REQUIRE_DURABLE).
var errNotDurable = errors.New("worker: the stock Redis may lose acknowledged writes")

// checkDurability looks at how the stock Redis keeps a write it acknowledged: the worker acks an order once
// its reservation is written, so a write Redis loses in a crash is a reservation whose outcome was
// published and whose entry is gone. A write survives a crash of the Redis process when replicas
// acknowledge it first (REPLICA_ACKS > 0), or when it is fsynced before the reply (appendonly yes and
// appendfsync always; with everysec, up to a second of writes can be lost). Otherwise the worker logs a
// warning, or with REQUIRE_DURABLE refuses to start. CONFIG GET is often refused (managed Redis, the
// worker's ACL user): then INFO persistence tells only whether the AOF is on, and the worker warns that
// it cannot tell the fsync policy.
func (w *Worker) checkDurability(ctx context.Context) error {
	if w.cfg.Replicas.Acks > 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return eachMaster(ctx, w.rdb, func(ctx context.Context, c *redis.Client) error {
		why, err := fsyncPolicy(ctx, c)
		if err != nil || why == "" {
			return err
		}
		which := "REDIS_URL" + nodeName(w.rdb, c)
		if w.cfg.RequireDurable {
			return fmt.Errorf("%w: %s %s; run it with appendonly yes and appendfsync always, or set REPLICA_ACKS, or unset REQUIRE_DURABLE", errNotDurable, which, why)
		}
		w.logger.Warn("the stock Redis may lose acknowledged reservations in a crash: run it with appendonly yes and appendfsync always, or set REPLICA_ACKS (REQUIRE_DURABLE=true refuses to start)",
			"redis", which, "why", why)
		return nil
	})
}

// fsyncPolicy says why c may lose an acknowledged write in a crash of its process; "" when it fsyncs every
// write before replying.
func fsyncPolicy(ctx context.Context, c *redis.Client) (string, error) {
	conf, err := configGet(ctx, c, "append*")
	if err == nil {
		switch {
		case conf["appendonly"] != "yes":
			return "has appendonly " + conf["appendonly"], nil
		case conf["appendfsync"] != "always":
			return "has appendfsync " + conf["appendfsync"], nil
		}
		return "", nil
	}
	var reply redis.Error
	if !errors.Is(err, errConfigRefused) && !errors.As(err, &reply) {
		return "", err
	}
	info, err := c.Info(ctx, "persistence").Result()
	if errors.As(err, &reply) { // a Redis-compatible server without it
		return "does not tell its persistence (" + err.Error() + ")", nil
	} else if err != nil {
		return "", err
	}
	if infoField(info, "aof_enabled") != "1" {
		return "has the append-only file off", nil
	}
	return "has the append-only file on, with an fsync policy the worker may not read (CONFIG GET refused)", nil
}

// errConfigRefused: the worker's user may not run CONFIG GET.
var errConfigRefused = errors.New("worker: CONFIG GET is not allowed")

// configGet runs CONFIG GET pattern when the connection's ACL user may (asked first, with the permission
// probe's script, so that a refusal does not land in the ACL log operators watch).
func configGet(ctx context.Context, c *redis.Client, pattern string) (map[string]string, error) {
	refused, err := permissionsScript.Run(ctx, c, nil, "CONFIG\nGET\n"+pattern).Int()
	if err == nil && refused > 0 {
		return nil, errConfigRefused
	}
	return c.ConfigGet(ctx, pattern).Result()
}
