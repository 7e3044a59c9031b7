package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// procs holds every server process the harness started, to stop each by
// its PID: at the end of a round, and on any failure or interrupt.
type procs struct {
	mu   sync.Mutex
	list map[int]*proc
}

// proc is one started server and the end of its wait.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // what Wait returned, once done is closed
}

func newProcs() *procs { return &procs{list: map[int]*proc{}} }

// start runs bin with args, its output appended to logPath.
func (ps *procs) start(name, logPath, bin string, args ...string) (*proc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	ps.mu.Lock()
	ps.list[cmd.Process.Pid] = p
	ps.mu.Unlock()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has ended, and how.
func (p *proc) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// stop sends SIGTERM to the process's PID, and SIGKILL if it is still
// there after grace; it returns once the process is gone.
func (ps *procs) stop(p *proc, grace time.Duration) {
	if done, _ := p.exited(); !done {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	ps.mu.Lock()
	delete(ps.list, p.pid())
	ps.mu.Unlock()
}

// stopAll stops every process still listed, all at once.
func (ps *procs) stopAll() {
	ps.mu.Lock()
	list := make([]*proc, 0, len(ps.list))
	for _, p := range ps.list {
		list = append(list, p)
	}
	ps.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range list {
		wg.Go(func() { ps.stop(p, 10*time.Second) })
	}
	wg.Wait()
}

// run runs a client command to its end (killed by its PID if ctx ends),
// and returns its standard output; its standard error goes to the log,
// and the end of it into the error of a command that failed.
func run(ctx context.Context, logf *os.File, bin string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = io.MultiWriter(logf, &stderr)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.Output()
	if err != nil {
		tail := stderr.Bytes()
		if len(tail) > 600 {
			tail = tail[len(tail)-600:]
		}
		return out, fmt.Errorf("%s %s: %w: %s", filepath.Base(bin), strings.Join(args, " "), err, bytes.TrimSpace(tail))
	}
	return out, nil
}
