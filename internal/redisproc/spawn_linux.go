package redisproc

import (
	"os/exec"
	"runtime"
	"syscall"
)

// The kernel sends PDEATHSIG when the *thread* that forked the child exits, not the process. Go may retire
// threads, so every server is forked from one goroutine locked to a thread that lives as long as the binary.
var spawnRequests = make(chan spawnRequest)

type spawnRequest struct {
	cmd  *exec.Cmd
	errc chan error
}

func init() {
	go func() {
		runtime.LockOSThread() // never unlocked: the thread lives until the process exits
		for r := range spawnRequests {
			r.errc <- r.cmd.Start()
		}
	}()
}

func spawn(bin string, args []string) (*exec.Cmd, error) {
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	errc := make(chan error)
	spawnRequests <- spawnRequest{cmd, errc}
	return cmd, <-errc
}
