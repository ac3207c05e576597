package childproc

import (
	"os/exec"
	"runtime"
	"syscall"
)

// The kernel sends PDEATHSIG when the *thread* that forked the child exits, not the process. Go may retire
// threads, so every child is forked from one goroutine locked to a thread that lives as long as the binary.
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

// spawn starts cmd as a child that the kernel kills when this process dies (PR_SET_PDEATHSIG), in a
// process group of its own.
func spawn(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	errc := make(chan error)
	spawnRequests <- spawnRequest{cmd, errc}
	return <-errc
}
