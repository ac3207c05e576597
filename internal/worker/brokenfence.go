//go:build stockflow_brokenfence

package worker

// The deliberately broken variant for the history checker's own test (internal/e2e): built with
// -tags stockflow_brokenfence, the worker's stock writes skip the fencing check. Never built otherwise.
func init() { fenceCheckOff = true }
