//go:build !linux

package redisproc

import "os/exec"

// StartChild starts cmd. Outside Linux there is no PDEATHSIG: children are stopped by their owner only.
func StartChild(cmd *exec.Cmd) error { return cmd.Start() }
