//go:build !linux

package redisproc

import "os/exec"

// spawn starts the server. Outside Linux there is no PDEATHSIG: servers are stopped by t.Cleanup only.
func spawn(bin string, args []string) (*exec.Cmd, error) {
	cmd := exec.Command(bin, args...)
	return cmd, cmd.Start()
}
