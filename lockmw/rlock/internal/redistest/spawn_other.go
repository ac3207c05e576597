//go:build !linux

package redistest

import "os/exec"

// spawn starts cmd. Outside Linux there is no PDEATHSIG: servers are stopped by their cleanup only.
func spawn(cmd *exec.Cmd) error { return cmd.Start() }
