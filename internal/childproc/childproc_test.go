package childproc_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockflow/stockflow/internal/childproc"
)

func start(t *testing.T, script string) *childproc.Process {
	t.Helper()
	p, err := childproc.Start(exec.Command("sh", "-c", script), filepath.Join(t.TempDir(), "child.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	return p
}

func TestLogHoldsStdoutAndStderr(t *testing.T) {
	p := start(t, "echo one; echo two >&2; echo three")
	if exited, err := p.Wait(5 * time.Second); !exited || err != nil {
		t.Fatalf("exited %v, err %v; want a clean exit", exited, err)
	}
	if got := strings.Join(p.LogTail(2), ","); got != "two,three" {
		t.Errorf("LogTail(2) = %q, want two,three", got)
	}
	if got := p.Log(); got != "one\ntwo\nthree\n" {
		t.Errorf("Log() = %q", got)
	}
}

func TestStopReturnsTheExitOfAChildThatHandlesSIGTERM(t *testing.T) {
	p := start(t, "trap 'exit 3' TERM; echo ready; while :; do sleep 0.01; done")
	waitLog(t, p, "ready")
	var exit *exec.ExitError
	if err := p.Stop(5 * time.Second); !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("Stop: %v, want exit status 3", err)
	}
}

func TestStopKillsAChildThatIgnoresSIGTERM(t *testing.T) {
	p := start(t, "trap '' TERM; echo ready; while :; do sleep 0.01; done")
	waitLog(t, p, "ready")
	err := p.Stop(200 * time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "did not stop") {
		t.Fatalf("Stop: %v, want it to say it had to kill", err)
	}
	if alive(p.Pid()) {
		t.Fatalf("pid %d still runs after Stop", p.Pid())
	}
}

func TestPausedChildRunsNothingUntilResume(t *testing.T) {
	p := start(t, "while :; do echo tick; sleep 0.01; done")
	waitLog(t, p, "tick")
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // a tick under way when SIGSTOP came may still land
	paused := p.Log()
	time.Sleep(200 * time.Millisecond)
	if p.Log() != paused {
		t.Fatal("the log grew while the child was paused")
	}
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for p.Log() == paused {
		if time.Now().After(deadline) {
			t.Fatal("the log did not grow after Resume")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestKillEndsAPausedChild(t *testing.T) {
	p := start(t, "sleep 60")
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	p.Kill()
	if alive(p.Pid()) {
		t.Fatalf("pid %d still runs after Kill", p.Pid())
	}
	p.Kill() // a second Kill does nothing
}

func TestWaitReadyFailsWhenTheChildExitsFirst(t *testing.T) {
	p := start(t, "exit 1")
	err := p.WaitReady(context.Background(), time.Millisecond, func(context.Context) error {
		return errors.New("not yet")
	})
	if !errors.Is(err, childproc.ErrExitedEarly) {
		t.Fatalf("got %v, want ErrExitedEarly", err)
	}
}

func TestWaitReadyEndsWithTheCauseOfItsContext(t *testing.T) {
	p := start(t, "sleep 60")
	cause := errors.New("not ready in time")
	ctx, cancel := context.WithTimeoutCause(context.Background(), 50*time.Millisecond, cause)
	defer cancel()
	err := p.WaitReady(ctx, time.Millisecond, func(context.Context) error { return errors.New("not yet") })
	if !errors.Is(err, cause) || !strings.Contains(err.Error(), "not yet") {
		t.Fatalf("got %v, want the cause and the last try", err)
	}
	calls := 0
	err = p.WaitReady(context.Background(), time.Millisecond, func(context.Context) error {
		if calls++; calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("got %v after %d calls, want nil after 3", err, calls)
	}
}

func waitLog(t *testing.T, p *childproc.Process, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(p.Log(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("the log never held %q: %q", want, p.Log())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func alive(pid int) bool {
	p, err := os.FindProcess(pid)
	return err == nil && p.Signal(syscall.Signal(0)) == nil
}
