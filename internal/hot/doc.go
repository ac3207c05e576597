// Package hot keeps which SKUs waited longest for their lock recently, so that an operator finds the hot
// SKUs with stockctl hot, without Grafana or a Jaeger search: /metrics has no per-SKU series (their
// cardinality), while this keeps a bounded few.
//
// Each worker's Recorder is told every decided order's wait for its SKU(s) by the lock middleware
// (lockmw.Middleware.Waits, a lockmw.WaitRecorder): per SKU, the orders, the total and the worst wait, the
// trace of the worst wait and the last trace (sampled traces only: those Jaeger has). Telling it costs a
// mutex and a map update on the order's path; it tracks at most MaxTracked SKUs per second (more are
// counted as dropped). Once a second (Interval), Run adds the second's SKUs of most total wait (at most
// MaxPublished) to the window of Window that the second falls in, in one script call (publish.lua): every
// worker adds to the same keys, so a window holds the sum over the workers. Read merges the windows of a
// recent span for stockctl hot.
//
// The worker wires it (internal/worker/worker.go): a field hot *hot.Recorder, set in setLocker with
// hot.NewRecorder(w.rdb, w.logger) and given to the lock middleware as Waits, run by Run with the
// housekeeping (go w.hot.Run(hkCtx)); and lockmw.Batcher.Done records a batch's followers through the
// leader's section (sec.RecordWait) rather than lockmw.RecordWait, so that they count too.
//
// Redis layout (REDIS_URL's Redis; the two keys of a window share a hash tag, so one slot of a cluster):
//
//	hot:{<window start, unix seconds>}        sorted set: SKU -> total wait of its orders, in milliseconds
//	hot:{<window start, unix seconds>}:stats  hash: <SKU>:orders, <SKU>:worst_ms, <SKU>:worst_trace,
//	                                          <SKU>:last_trace (trace ids in hex, as Jaeger shows them)
//
// A window keeps at most MaxPerWindow SKUs (those of least total wait go first) and both keys expire
// Retention after its last write. Windows are cut by each worker's clock: a skew between workers puts
// their seconds in neighbouring windows, which Read merges anyway.
package hot
