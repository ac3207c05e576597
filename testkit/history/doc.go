// Package history records what the workers of a fault test did and proves afterwards that it was correct.
//
// The fault tests (kill -9, SIGSTOP of a lock holder, Redis restarts, partitions) cannot tell from the
// final stock alone whether a stale lock holder wrote, or whether an order was decided twice and the sums
// happened to come out right. So every worker process records each lock hold and each stock operation
// into a file (Recorder), and a checker reads the files back (Load) and checks them (Check, or Verify in a
// test):
//
//   - Linearizability, with github.com/anishathalye/porcupine: the stock of each SKU is one object whose
//     operations are reserve-if-enough and release, idempotent per order id. Operations whose outcome is
//     unknown (timeout, connection lost, process killed) may or may not have taken effect; operations
//     the store refused (stale fence, invalid input) had none.
//   - Fencing: no write was accepted from a token older than one whose acquisition had returned before
//     the write was invoked, and writes that do not overlap in time were accepted in token order.
//
// # File format
//
// One JSON object per line, appended with one write(2) per event on a file opened with O_APPEND, so
// several processes may share a file and a process killed mid-write loses at most its last line (Load
// tolerates a truncated last line). Times are RFC 3339 with nanoseconds, in UTC. Every line has "event",
// "worker" (the recording process) and "time" (when the event happened):
//
//	{"event":"acquired","worker":"w1","time":T,"invoked":T,"key":"SKU-1","owner":"w1:3f..:17","token":3}
//	{"event":"released","worker":"w1","time":T,"key":"SKU-1","owner":"w1:3f..:17","token":3}
//	{"event":"invoke","worker":"w1","time":T,"op":"9c0e..-42","kind":"reserve","sku":"SKU-1","order":"o-7","quantity":2,"token":3}
//	{"event":"return","worker":"w1","time":T,"op":"9c0e..-42","status":"reserved","reason":"","quantity":2,"available_after":5,"replayed":false}
//	{"event":"fail","worker":"w1","time":T,"op":"9c0e..-42","failure":"unknown","error":"context deadline exceeded"}
//
// For "acquired", "time" is when the acquisition returned: from then on the store knows the token.
// An "invoke" is written before the operation starts and its "return" or "fail" after it ended; an
// invoke without either (the process died) is an operation with an unknown outcome.
package history
