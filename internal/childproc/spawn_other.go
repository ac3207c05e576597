//go:build !linux

package childproc

import "os/exec"

// spawn starts cmd. Outside Linux there is no PDEATHSIG: children are stopped by their owner only.
func spawn(cmd *exec.Cmd) error { return cmd.Start() }
