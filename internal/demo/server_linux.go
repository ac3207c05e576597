package demo

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill the child if the demo dies without stopping it.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
