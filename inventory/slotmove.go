package inventory

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// slotMoveBackoff are the pauses before the retries of a script call that met its slot being moved: 150
// ms in all, about what moving a slot of a few thousand keys takes.
var slotMoveBackoff = []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond, 80 * time.Millisecond}

// retryTryAgain runs call, and again after each pause of slotMoveBackoff while the reply says the slot of
// its keys is being moved (slotMoving), and returns the last reply; one that still says so fails with
// ErrSlotMoving. Such a reply comes before the script runs, so running it again is always safe.
//
// While a slot moves, a script whose keys are split between the two nodes gets TRYAGAIN: a new order's
// outcome record exists on neither, so every new order of the slot's SKUs meets it until the last key
// has moved and the slot is handed over. go-redis v9.23 does not wait that long:
//   - ClusterClient.process retries TRYAGAIN (shouldRetry), but in a budget of MaxRedirects (default 3)
//     attempts shared with ASK hops, with its retry backoff (10 ms + up to 20, 40, 80 ms by default)
//     before the attempts after a TRYAGAIN only: at most about 170 ms, and once the SKU's stock key has
//     moved (source: ASK, target: TRYAGAIN, source: ASK, target: TRYAGAIN) a single pause of 10-50 ms;
//   - a ClusterClient pipeline follows MOVED and ASK but leaves every other error reply, TRYAGAIN
//     included, on its command (pipelineReadCmds): ReserveBatches runs such a batch again alone;
//   - with WithReplicaAcks the script runs on the node's own *redis.Client (see serverOf), which follows
//     no redirect: it gets ASK once the keys it names have moved, and MOVED once the slot has.
//
// Without this the order would go back to the stream and wait for the general retry (a second or more).
func retryTryAgain(ctx context.Context, call func() *redis.Cmd) *redis.Cmd {
	cmd := call()
	for _, pause := range slotMoveBackoff {
		if !slotMoving(cmd.Err()) || sleep(ctx, pause) != nil {
			break
		}
		cmd = call()
	}
	if err := cmd.Err(); slotMoving(err) {
		cmd.SetErr(fmt.Errorf("%w (%d attempts): %w", ErrSlotMoving, len(slotMoveBackoff)+1, err))
	}
	return cmd
}

// slotMoving reports whether err is a reply that says the slot of the command's keys is being moved, or
// was just moved, so the command did not run: TRYAGAIN, ASK, MOVED.
func slotMoving(err error) bool {
	// (HasErrorPrefix allocates, even for no error.)
	return err != nil && (redis.HasErrorPrefix(err, "TRYAGAIN") || redis.HasErrorPrefix(err, "ASK ") || redis.HasErrorPrefix(err, "MOVED "))
}

// sleep waits for d or until ctx is done, and then returns ctx's error.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
