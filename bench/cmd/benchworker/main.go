// Command benchworker is the stockflow worker with a choice of lock, for the end-to-end comparison of the
// bench harness: --lock on (stockflow's lock, as cmd/worker), off (no lock: only the stock script's
// atomicity protects the stock) or redsync (go-redsync/redsync with its defaults, on REDIS_URL). Every
// other setting is cmd/worker's.
package main

import (
	"fmt"
	"os"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/bench/internal/redsynclock"
	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/internal/worker"
	"github.com/stockflow/stockflow/lockmw/rlock"
)

func main() {
	os.Exit(worker.Main("benchworker", os.Args[1:], lockFlag))
}

func lockFlag(set *config.Set) func(worker.Config, *worker.Options) error {
	var lock string
	set.String(&lock, "lock", "on", "on: stockflow's lock; off: no lock; redsync: redsync's mutex with its defaults")
	return func(cfg worker.Config, o *worker.Options) (err error) {
		o.Locker, err = pickLocker(lock, cfg)
		return err
	}
}

func pickLocker(lock string, cfg worker.Config) (rlock.Locker, error) {
	switch lock {
	case "on":
		return nil, nil
	case "off":
		return worker.NoLock, nil
	case "redsync":
		opts, err := config.RedisOptions(cfg.RedisURL)
		if err != nil {
			return nil, fmt.Errorf("invalid REDIS_URL: %w", err)
		}
		return redsynclock.New(redsync.New(goredis.NewPool(redis.NewClient(opts)))), nil
	}
	return nil, fmt.Errorf("invalid --lock %q: want on, off or redsync", lock)
}
