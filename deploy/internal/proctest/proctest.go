// Package proctest runs the nodes a deployment file describes as processes on
// loopback, for the tests of deploy/compose and deploy/kubernetes: qmqd and
// qmqctl built once, each "container" a process with its exact arguments and
// environment, only addresses and paths moved. It is imported by tests only.
package proctest

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// Binaries builds qmqd and qmqctl once per test binary and returns the
// directory that holds them.
func Binaries(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "qmq-deploy-bin-")
		if buildErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", binDir+"/", "github.com/qmqgo/qmq/cli/qmqd", "github.com/qmqgo/qmq/cli/qmqctl")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

// Bin is the path of the built binary for a container's command, which
// names qmqd or qmqctl by name or by its path in the image.
func Bin(t testing.TB, command string) string {
	t.Helper()
	name := filepath.Base(command)
	if name != "qmqd" && name != "qmqctl" {
		t.Fatalf("command %q is neither qmqd nor qmqctl", command)
	}
	return filepath.Join(Binaries(t), name)
}

// Proc is one container's process, restartable with the same command.
type Proc struct {
	Name string
	Path string
	Args []string
	Env  []string
	Log  string // file the process's output is appended to

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start starts the process; the test's cleanup kills it by its PID if it
// still runs.
func (p *Proc) Start(t testing.TB) {
	t.Helper()
	f, err := os.OpenFile(p.Log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(p.Path, p.Args...)
	cmd.Env = p.Env
	cmd.Stdout, cmd.Stderr = f, f
	// A test binary killed (a timeout's panic) skips its cleanups: the
	// kernel kills the node with it, so that none keeps its ports.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s: %v", p.Name, err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			_ = cmd.Process.Kill()
			<-done
		}
	})
}

// Signal sends sig to the process by its PID.
func (p *Proc) Signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if err := syscall.Kill(cmd.Process.Pid, sig); err != nil {
		t.Fatalf("signal %s: %v", p.Name, err)
	}
}

// Wait waits at most d for the process to exit and returns how it exited.
func (p *Proc) Wait(t testing.TB, d time.Duration) error {
	t.Helper()
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s still runs %v after the signal; its log:\n%s", p.Name, d, p.Tail())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Tail is the end of the process's log, for a failure's message.
func (p *Proc) Tail() string {
	b, _ := os.ReadFile(p.Log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Run runs a command to its end and returns its output and error.
func Run(ctx context.Context, path string, args, env []string) (string, error) {
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// RunUntilOK runs a one-shot container's command again until it exits 0, as
// restartPolicy OnFailure (or Compose's restart: on-failure) does, and
// fails the test if it has not by the deadline.
func RunUntilOK(t testing.TB, name, path string, args, env []string, deadline time.Time) {
	t.Helper()
	var last string
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		out, err := Run(ctx, path, args, env)
		cancel()
		if err == nil {
			return
		}
		last = fmt.Sprintf("%v: %s", err, out)
		if time.Now().After(deadline) {
			t.Fatalf("%s did not succeed in time; last: %s", name, last)
		}
		time.Sleep(500 * time.Millisecond) // the restart's back-off
	}
}

// Poll calls f until it returns nil, and fails the test with f's last error
// if it has not by d.
func Poll(t testing.TB, d time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, d, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// probe is a client as the kubelet's HTTPS probes are: no client
// certificate, the server's not verified.
var probe = &http.Client{
	Timeout:   2 * time.Second,
	Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true},
}

// Get asks url as a probe does and returns an error unless it answers 200.
func Get(url string) error {
	resp, err := probe.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %d %s", url, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return nil
}

// InsecureTransport is the probes' transport, for tests that read a node's
// /status as a scraper without the CA would.
func InsecureTransport() *http.Transport {
	return &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true}
}
