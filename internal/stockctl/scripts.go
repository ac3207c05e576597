package stockctl

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The scripts that write: each checks and writes in one step (see each file's header for KEYS and ARGV).
var (
	//go:embed poison_replay.lua
	replayLua    string
	replayScript = redis.NewScript(replayLua)
)
