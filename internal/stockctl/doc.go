// Package stockctl is the operator CLI of stockflow: it shows and sets stock, inspects a SKU's lock and
// fencing counter, shows the consumer group's pending entries, lists and replays poison entries, and prunes
// dead consumers. cmd/stockctl is a thin main around Run.
//
//	stockctl stock SKU...                       available, reserved and fence per SKU
//	stockctl stock get SKU...                   the same (for a SKU named "set" or "add")
//	stockctl stock set SKU N                    set the available stock (inventory SetStock)
//	stockctl stock add SKU N                    add to the available stock (inventory Restock)
//	stockctl order ORDER_ID --sku SKU           the outcome recorded for an order
//	stockctl lock SKU                           lock holder, lease, fencing counter and stored fence
//	stockctl pending [--limit N]                consumer group, its consumers and pending entries
//	stockctl poison list [--limit N]            poison entries, newest first
//	stockctl poison replay (--id ID... | --reason-contains S | --all) [--dry-run] [--force]
//	                                            move poison entries back to the orders stream
//	stockctl consumers prune [--idle D] [--dry-run]
//	                                            delete idle consumers that have no pending entries
//
// Settings are those of the worker (REDIS_URL, REDIS_TLS_CA_FILE, REDIS_TLS_CERT_FILE, REDIS_TLS_KEY_FILE,
// ORDERS_STREAM, RESULTS_STREAM, POISON_STREAM, CONSUMER_GROUP, REDLOCK_URLS, OUTCOME_TTL), each an environment
// variable and a flag; the flag wins. --json prints machine output, --timeout bounds the command (default
// 10s). Flags may come before or after the command. stockctl -h (or help) lists the commands and every flag;
// stockctl help COMMAND and stockctl COMMAND -h show one command: its arguments, its flags and an example.
//
// Exit codes:
//
//	0  success
//	1  operational failure: Redis unreachable, a script or command error, the timeout
//	2  usage error: unknown command, bad argument or setting; nothing was written
//	3  not found: unknown SKU, no such poison entry id, stream or group missing (pending, prune)
//
// poison list shows the newest entries first; poison replay goes oldest first (--id: in the order given).
// A replay moves each poison entry in one script call (poison_replay.lua): the original fields (all but
// poison_*) plus replayed_from = the poison entry id and replayed_source_id = the id the order was first
// published as are added to ORDERS_STREAM and the poison entry is deleted, so concurrent replays replay
// each entry at most once (and a replay resent after a lost reply finds its latch and reports the entry
// replayed); an entry poisoned without its fields (oversized) is refused, and so, unless
// --force, is one whose order was first published longer ago than OUTCOME_TTL allows (poison_age.go): its
// outcome records may have expired, and a replay could reserve it again. consumers prune checks and deletes each consumer in one script call too
// (prune_consumer.lua), so a consumer with pending entries is never deleted.
//
// With --json, stdout holds one JSON document per run, written when the command got as far as a report
// (also for exit code 3 from stock with an unknown SKU or replay with a missing --id); errors go to stderr.
package stockctl
