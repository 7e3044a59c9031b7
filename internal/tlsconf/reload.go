package tlsconf

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultCheckEvery is Options.CheckEvery's default.
const DefaultCheckEvery = time.Second

// Options tune a Reloader.
type Options struct {
	// CheckEvery is the least time between two looks at the files: a
	// handshake or dial looks (three os.Stat calls) when the last look is
	// at least this old, and reloads the files when one has changed. New
	// connections therefore see replaced files within CheckEvery. Zero
	// means the default, 1 s; a negative value looks on every handshake
	// and dial (for tests).
	CheckEvery time.Duration
	// Warn reports a changed set of files that does not load (the previous
	// one stays in use), once per set. Default: nothing is reported.
	Warn func(msg string, kv ...any)

	// Tests replace these: os.Stat and time.Now by default.
	stat func(string) (os.FileInfo, error)
	now  func() time.Time
}

// Reloader holds the certificates of one Files set, rereading them when
// they change. Its configs are safe for concurrent use; it needs no Close.
type Reloader struct {
	files Files
	every time.Duration
	warn  func(msg string, kv ...any)
	stat  func(string) (os.FileInfo, error)
	now   func() time.Time

	snap atomic.Pointer[snapshot]
	next atomic.Int64 // no look before this time, in Unix nanoseconds

	mu        sync.Mutex // held by the one look under way; guards failed
	failed    [3]stamp   // the last set that did not load, so it warns once
	hasFailed bool
}

// snapshot is one loaded set of files and the server configs made of it.
type snapshot struct {
	stamps [3]stamp // CA, Cert, Key as they were before reading
	material
	server [3]*tls.Config // by ClientAuth
	nodes  *tls.Config    // Require, and a node certificate
}

// Load reads f (which must pass f.Check) and returns its Reloader. It
// fails if the files do not load, so that a node refuses to start.
func Load(f Files, o Options) (*Reloader, error) {
	if err := f.Check(); err != nil {
		return nil, err
	}
	r := &Reloader{files: f, every: o.CheckEvery, warn: o.Warn, stat: o.stat, now: o.now}
	if r.every == 0 {
		r.every = DefaultCheckEvery
	}
	if r.warn == nil {
		r.warn = func(string, ...any) {}
	}
	if r.stat == nil {
		r.stat = os.Stat
	}
	if r.now == nil {
		r.now = time.Now
	}
	r.next.Store(r.now().Add(r.every).UnixNano())
	s, err := r.load()
	if err != nil {
		return nil, err
	}
	r.snap.Store(s)
	return r, nil
}

// current is the snapshot to use, after a look at the files if none was
// taken within CheckEvery. One goroutine looks at a time; the others use
// the snapshot they find.
func (r *Reloader) current() *snapshot {
	s := r.snap.Load()
	if r.every > 0 {
		now := r.now().UnixNano()
		next := r.next.Load()
		if now < next || !r.next.CompareAndSwap(next, now+int64(r.every)) {
			return s
		}
	}
	if !r.mu.TryLock() {
		return s
	}
	defer r.mu.Unlock()
	r.look()
	return r.snap.Load()
}

// look reloads the files if their stamps changed. A set that does not
// load keeps the previous snapshot and warns, once for those stamps.
func (r *Reloader) look() {
	stamps, err := r.stamps()
	if err == nil && stamps == r.snap.Load().stamps {
		r.hasFailed = false
		return
	}
	if r.hasFailed && stamps == r.failed {
		return
	}
	var s *snapshot
	if err == nil {
		s, err = r.loadStamped(stamps)
	}
	if err != nil {
		r.failed, r.hasFailed = stamps, true
		r.warn("tls files changed but do not load; keeping the previous ones", "error", err)
		return
	}
	r.hasFailed = false
	r.snap.Store(s)
}

// stamps looks at the files given, reporting the first that cannot be
// looked at.
func (r *Reloader) stamps() ([3]stamp, error) {
	var out [3]stamp
	var first error
	for i, path := range [3]string{r.files.CA, r.files.Cert, r.files.Key} {
		if path == "" {
			continue
		}
		fi, err := r.stat(path)
		if err != nil {
			out[i].missing = true
			if first == nil {
				first = fmt.Errorf("tlsconf: %w", err)
			}
			continue
		}
		out[i] = stampOf(fi)
	}
	return out, first
}

// load stamps and reads the files.
func (r *Reloader) load() (*snapshot, error) {
	stamps, err := r.stamps()
	if err != nil {
		return nil, err
	}
	return r.loadStamped(stamps)
}

// loadStamped reads the files into a snapshot recorded with stamps, taken
// before reading: a file that changes meanwhile is read again at the next
// look.
func (r *Reloader) loadStamped(stamps [3]stamp) (*snapshot, error) {
	m, err := readMaterial(r.files)
	if err != nil {
		return nil, err
	}
	s := &snapshot{stamps: stamps, material: m}
	for _, a := range []ClientAuth{Require, Request, None} {
		s.server[a] = s.serverConfig(a)
	}
	s.nodes = s.serverConfig(Require)
	s.nodes.VerifyConnection = verifyNode
	return s, nil
}
