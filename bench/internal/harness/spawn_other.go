//go:build !linux

package harness

import "os/exec"

func start(cmd *exec.Cmd) error { return cmd.Start() }
