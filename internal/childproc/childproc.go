// Package childproc runs the child processes of the tests, the demo and the benchmark harness (redis-servers,
// worker binaries) one way: started with their output in a log file, signalled, paused, stopped and killed.
//
// A child dies with the process that started it (PR_SET_PDEATHSIG on Linux) and runs in a process group of
// its own, so neither a crashed test binary nor a Ctrl-C in the terminal leaves one behind or half-killed.
package childproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// ErrExitedEarly is returned by WaitReady when the process exited before it was ready.
var ErrExitedEarly = errors.New("childproc: exited before it was ready")

// Process is a started child process.
type Process struct {
	cmd  *exec.Cmd
	log  string        // the file its stdout and stderr go to; "" when the caller chose them
	done chan struct{} // closed once it has exited and been reaped; err is then its exit error
	err  error
}

// Start starts cmd. With a logPath, its stdout and stderr go to that file (created, or truncated);
// without, they stay as cmd has them.
func Start(cmd *exec.Cmd, logPath string) (*Process, error) {
	if logPath != "" {
		logf, err := os.Create(logPath)
		if err != nil {
			return nil, err
		}
		defer logf.Close() // the child has its own copy
		cmd.Stdout, cmd.Stderr = logf, logf
	}
	if err := spawn(cmd); err != nil {
		return nil, err
	}
	p := &Process{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	return p, nil
}

// Pid is the child's process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Signal sends sig to the child.
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Pause stops the child with SIGSTOP: it keeps its sockets but runs nothing until Resume.
func (p *Process) Pause() error { return p.Signal(syscall.SIGSTOP) }

// Resume continues a paused child with SIGCONT.
func (p *Process) Resume() error { return p.Signal(syscall.SIGCONT) }

// Kill sends SIGKILL (which also ends a paused child) and waits until the child is reaped. Killing a child
// that has exited does nothing.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Stop asks the child to end with SIGTERM and waits up to grace; past that it kills it. It returns the
// exit error (nil for status 0), or an error saying it had to kill.
func (p *Process) Stop(grace time.Duration) error {
	_ = p.Signal(syscall.SIGTERM)
	if exited, err := p.Wait(grace); exited {
		return err
	}
	p.Kill()
	return fmt.Errorf("did not stop within %v of SIGTERM", grace)
}

// Wait waits up to timeout for the child to exit. exited says whether it did; err is then its exit error.
func (p *Process) Wait(timeout time.Duration) (exited bool, err error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.done:
		return true, p.err
	case <-timer.C:
		return false, nil
	}
}

// WaitReady calls ready every interval until it returns nil. It fails with ErrExitedEarly when the child
// exits first, and with the cause of ctx (and ready's last error) when ctx ends first.
func (p *Process) WaitReady(ctx context.Context, interval time.Duration, ready func(context.Context) error) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		err := ready(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%w: %v", ErrExitedEarly, p.err)
		case <-ctx.Done():
			return fmt.Errorf("%w (last try: %v)", context.Cause(ctx), err)
		case <-tick.C:
		}
	}
}

// Log is everything the child wrote to its log file so far.
func (p *Process) Log() string {
	data, _ := os.ReadFile(p.log)
	return string(data)
}

// LogTail is the last n lines of the log.
func (p *Process) LogTail(n int) []string {
	lines := strings.Split(strings.TrimSpace(p.Log()), "\n")
	return lines[max(0, len(lines)-n):]
}

// FreeAddr is a loopback host:port that nothing listens on now, for a child to listen on. Someone else may
// take it before the child binds it: a child that fails to start on it should be tried on another.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
