// Package stockctl is the operator CLI of stockflow: it shows and sets stock, inspects a SKU's lock and
// fencing counter, shows the SKUs whose orders waited longest for their lock across the workers (hot),
// shows the consumer group, its consumers and pending entries, lists and replays poison
// entries, and prunes dead consumers. cmd/stockctl is a thin main around Run.
//
//	stockctl stock [SKU...]                     available, reserved and fence per SKU; none: the SKUs stocked
//	stockctl stock get SKU...                   the same (for a SKU named "get", "set" or "add")
//	stockctl stock set SKU N                    set the available stock (inventory SetStock)
//	stockctl stock add SKU N                    add to the available stock (inventory Restock)
//	stockctl order ORDER_ID --sku SKU           the outcome recorded for an order
//	stockctl lock SKU                           lock holder, lease, fencing counter and stored fence
//	stockctl hot [--since D] [--limit N] [--sort-by wait|orders|worst]
//	                                            the SKUs that waited longest for their lock (package hot)
//	stockctl pending [--limit N]                consumer group, its consumers and pending entries
//	stockctl consumers                          the group's consumers
//	stockctl consumers prune [--idle D] [--dry-run]
//	                                            delete idle consumers that have no pending entries
//	stockctl poison [list] [--limit N]          poison entries, newest first
//	stockctl poison replay (--id ID... | --reason-contains S | --all) [--dry-run] [--force]
//	                                            move poison entries back to the orders stream
//	stockctl completion bash|zsh|fish|powershell
//	                                            the shell's completion script
//
// The commands are cobra's (github.com/spf13/cobra, as kubectl's): a command that takes a name lists when
// given none, a mistyped command gets suggestions ("stok": did you mean stock?), every shell gets completion,
// -h anywhere shows help. Two things differ from cobra's defaults (help.go): flags are listed as every
// stockflow binary lists them (the flag, the name of its value, its environment variable and default), and
// help about a command that does not exist is a usage error, as an unknown command is.
//
// Settings are those of the worker (REDIS_URL, REDIS_TLS_CA_FILE, REDIS_TLS_CERT_FILE, REDIS_TLS_KEY_FILE,
// ORDERS_STREAM, RESULTS_STREAM, POISON_STREAM, CONSUMER_GROUP, REDIS_CLUSTER, ORDERS_PARTITIONS,
// REDLOCK_URLS, OUTCOME_TTL), each an environment variable and a global flag; the flag wins (package config
// reads them). -o text|wide|json|yaml chooses the output (--json is -o json); in JSON and YAML every duration
// is a number of milliseconds in a field named *_ms, timestamps are RFC 3339. --timeout bounds the command
// (default 10s).
//
// Exit codes:
//
//	0  success
//	1  operational failure: Redis unreachable, a script or command error, the timeout
//	2  usage error: unknown command, bad argument or setting; nothing was written
//	3  not found: unknown SKU, no such poison entry id, stream or group missing (pending, consumers)
//	4  nothing done: a replay that replayed nothing, a prune that deleted nothing (a dry run exits 0)
//
// poison list shows the newest entries first; poison replay goes oldest first (--id: in the order given).
// A replay moves each poison entry in one script call (poison_replay.lua): the original fields (all but
// poison_*) plus replayed_from = the poison entry id and replayed_source_id = the id the order was first
// published as are added to ORDERS_STREAM and the poison entry is deleted, so concurrent replays replay
// each entry at most once (and a replay resent after a lost reply finds its latch and reports the entry
// replayed); an entry poisoned without its fields (oversized) is refused, and so, unless --force, is one
// whose order was first published longer ago than OUTCOME_TTL allows (poison_age.go): its outcome records
// may have expired, and a replay could reserve it again. consumers prune checks and deletes each consumer
// in one script call too (prune_consumer.lua), so a consumer with pending entries is never deleted.
//
// With -o json or yaml, stdout holds one document per run, written when the command got as far as a
// report (also for exit code 3 from stock with an unknown SKU or replay with a missing --id, and for exit
// code 4). Standard error has log records only (config.Logger: JSON unless it is a terminal): the last one
// says why the command failed, with its exit code (config.Exit), and a warning says when REDIS_URL is not
// set and the default Redis is used.
package stockctl
