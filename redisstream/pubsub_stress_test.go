//go:build stress

package redisstream_test

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
)

func TestWatermillsPubSubStressTestPasses(t *testing.T) {
	p := &pubSubs{top: t}
	tests.TestPubSubStressTest(t, features, p.create, p.withGroup)
}
