package testdb

import (
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// readyTimeout bounds the wait for a started server to take connections.
const readyTimeout = time.Minute

// findProgram returns the path of the first of candidates (names looked
// up in PATH, or glob patterns of absolute paths) that exists, or an
// error that says how to install what is missing.
func findProgram(what, pkg string, candidates ...string) (string, error) {
	for _, c := range candidates {
		if filepath.IsAbs(c) {
			if m, _ := filepath.Glob(c); len(m) > 0 {
				return m[len(m)-1], nil // the newest version of a versioned directory
			}
			continue
		}
		if p, err := exec.LookPath(c); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("testdb: %s is not installed (none of %s found): `make test` installs it when run as root, "+
		"or install Debian's %s (apt-get install %s)", what, strings.Join(candidates, ", "), pkg, pkg)
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// runAs is the account a server runs as: PostgreSQL refuses to run as
// root, so a test run by root starts it as the "postgres" account (made
// by Debian's package), or "nobody"; anyone else runs it as themselves.
type runAs struct {
	cred *syscall.Credential // nil: as this process
	name string
}

func accountFor(prefer ...string) (runAs, error) {
	if os.Geteuid() != 0 {
		u, err := user.Current()
		if err != nil {
			return runAs{}, err
		}
		return runAs{name: u.Username}, nil
	}
	for _, name := range prefer {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		return runAs{cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, name: name}, nil
	}
	return runAs{}, fmt.Errorf("testdb: running as root, and none of the accounts %v exists to run the server as", prefer)
}

// own gives dir to the account, so that a server run as it can write there.
func (a runAs) own(dir string) error {
	if a.cred == nil {
		return nil
	}
	return os.Chown(dir, int(a.cred.Uid), int(a.cred.Gid))
}

// command returns cmd set to run as the account, with its output appended
// to log, and to be killed by the kernel if this process dies first.
func (a runAs) command(log *os.File, program string, args ...string) *exec.Cmd {
	cmd := exec.Command(program, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: a.cred, Pdeathsig: syscall.SIGKILL}
	return cmd
}

// run runs a setup program (initdb, mariadb-install-db) to its end.
func (a runAs) run(log *os.File, program string, args ...string) error {
	if err := a.command(log, program, args...).Run(); err != nil {
		return fmt.Errorf("%s: %w (its output is in %s)", filepath.Base(program), err, log.Name())
	}
	return nil
}

// serve starts the server program and returns s running once admin, a
// connection to it, answers; on any failure it kills the program and
// returns an error with the end of the server's log.
func (s *server) serve(a runAs, log *os.File, driver, adminDSN, program string, args ...string) error {
	cmd := a.command(log, program, args...)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("testdb: start %s: %w", s.name, err)
	}
	s.proc, s.exited = cmd.Process, make(chan struct{})
	go func() { cmd.Wait(); close(s.exited) }()
	admin, err := sql.Open(driver, adminDSN)
	if err == nil {
		err = s.awaitReady(admin)
	}
	if err != nil {
		if admin != nil {
			admin.Close()
		}
		s.kill()
		return fmt.Errorf("testdb: %s did not take connections: %w\n%s", s.name, err, logTail(log.Name()))
	}
	s.admin = admin
	return nil
}

// awaitReady pings db until it answers, the server exits, or readyTimeout.
func (s *server) awaitReady(db *sql.DB) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		err := db.Ping()
		if err == nil {
			return nil
		}
		select {
		case <-s.exited:
			return errors.New("the server exited")
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still refused after %v: %w", readyTimeout, err)
		}
	}
}

// stop closes the admin connection, stops the server (SIGTERM, then
// SIGKILL after 30 s) and removes its directory.
func (s *server) stop() error {
	if s.admin != nil {
		s.admin.Close()
	}
	s.proc.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		s.kill()
	}
	return os.RemoveAll(s.dir)
}

func (s *server) kill() {
	s.proc.Kill()
	<-s.exited
}

// logTail returns the last lines of a server's log, for an error.
func logTail(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-20):], "\n")
}
