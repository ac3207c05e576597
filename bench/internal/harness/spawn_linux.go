package harness

import (
	"os/exec"
	"runtime"
	"syscall"
)

// Workers get SIGKILL when the harness dies (PR_SET_PDEATHSIG). The kernel sends it when the forking
// *thread* exits, so every child is forked from one goroutine locked to a thread that lives as long as the
// process (as internal/redisproc does for the redis-servers).
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

func start(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	errc := make(chan error)
	spawnRequests <- spawnRequest{cmd, errc}
	return <-errc
}
