// Command worker consumes order events from a Redis Stream and reserves stock for them, one SKU lock at a
// time. Settings come from flags and environment variables; see README.md or run worker -h. worker probe
// asks a running worker whether it is ready (compose.yaml's healthcheck): see docs/configuration.md.
package main

import (
	"os"

	"github.com/stockflow/stockflow/internal/worker"
)

func main() {
	os.Exit(worker.Main("worker", os.Args[1:], nil))
}
