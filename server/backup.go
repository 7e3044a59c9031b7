package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/transport"
)

// BackupLimits bound the snapshots a node holds open for backups
// (TypeBackup); a zero field takes its default.
type BackupLimits struct {
	// Max is how many backups the node serves at once; one more is
	// refused with RESOURCE_EXHAUSTED. Default 2.
	Max int
	// Idle is how long a backup's snapshot is held after its last request
	// before it is released (the backup is abandoned; run again, it
	// resumes if the snapshot is still stored, else starts over).
	// Default 2 minutes.
	Idle time.Duration
	// Rate bounds the bytes a second the node's backups read, all
	// together, so that a backup leaves the leader's disk and CPU to the
	// sends it serves. 0 (the default): no bound.
	Rate int64
}

// Defaults of BackupLimits.
const (
	DefaultMaxBackups  = 2
	DefaultBackupIdle  = 2 * time.Minute
	backupSnapshotWait = time.Minute // bounds taking the snapshot a backup reads
)

func (l BackupLimits) withDefaults() BackupLimits {
	if l.Max == 0 {
		l.Max = DefaultMaxBackups
	}
	if l.Idle == 0 {
		l.Idle = DefaultBackupIdle
	}
	return l
}

// backups are the snapshots a group's leader holds open for backups, by
// snapshot id. A backup is served by the leader: the client finds it as it
// finds the leader for any admin request, and a session lives on the node
// that opened it, so it must be reached again at every chunk (a
// follower's snapshot would be as consistent, but a client has no stable
// way to reach one follower). The snapshot is a Raft user snapshot taken
// for the backup (hard links for a broker group, no data copied), so it is
// as recent as the request; Raft's own store keeps it pinned while it is
// read (fsm/snapshot's Store).
type backups struct {
	kind   byte
	group  string
	limits BackupLimits
	// take takes a new snapshot and opens it; open opens a stored one a
	// request names, if the store lists it; reopen opens a session's own
	// again (listed or not: the session pins it).
	take         func(ctx context.Context) (*raft.SnapshotMeta, io.ReadCloser, error)
	open, reopen func(id string) (*raft.SnapshotMeta, io.ReadCloser, error)

	// mu guards what follows. Lock order: a session's mu, then this one
	// (drop); never a session's while holding this.
	mu       sync.Mutex
	sessions map[string]*backupSession
	held     int // sessions, and snapshots being taken for new ones
	closed   bool
	// next is when the next chunk may be read, by limits.Rate.
	next time.Time
}

// backupSession is one snapshot open for a backup, read sequentially.
type backupSession struct {
	mu     sync.Mutex
	meta   *raft.SnapshotMeta
	config []byte
	rc     io.ReadCloser // nil once released
	pos    int64
	timer  *time.Timer
}

func newBackups(kind byte, group string, limits BackupLimits, snaps raft.SnapshotStore, r func() *raft.Raft) *backups {
	b := &backups{kind: kind, group: group, limits: limits.withDefaults(), sessions: map[string]*backupSession{}, reopen: snaps.Open}
	// Only a snapshot the store lists is opened: an id from a request is
	// never made into a path.
	b.open = func(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
		metas, err := snaps.List()
		if err != nil {
			return nil, nil, err
		}
		for _, m := range metas {
			if m.ID == id {
				return snaps.Open(id)
			}
		}
		return nil, nil, fmt.Errorf("snapshot %q is no longer stored", id)
	}
	b.take = func(ctx context.Context) (*raft.SnapshotMeta, io.ReadCloser, error) {
		f := r().Snapshot()
		done := make(chan error, 1)
		go func() { done <- f.Error() }()
		select {
		case err := <-done:
			if errors.Is(err, raft.ErrNothingNewToSnapshot) {
				// Nothing applied since the newest snapshot: it is as recent.
				metas, lerr := snaps.List()
				if lerr != nil || len(metas) == 0 {
					return nil, nil, errors.Join(err, lerr)
				}
				return snaps.Open(metas[0].ID)
			}
			if err != nil {
				return nil, nil, err
			}
			return f.Open()
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
	return b
}

// count is how many snapshots are held for backups.
func (b *backups) count() int {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.sessions)
}

// close releases every snapshot held; no backup is served after it.
func (b *backups) close() {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.closed = true
	all := b.sessions
	b.sessions = map[string]*backupSession{}
	b.mu.Unlock()
	for _, s := range all {
		s.release()
	}
}

// handleBackup answers a TypeBackup request on the group's leader.
func (g *raftGroup) handleBackup(ctx context.Context, p []byte) ([]byte, error) {
	var req transport.BackupRequest
	if err := transport.DecodeJSON(p, &req); err != nil {
		return nil, err
	}
	if req.Group != g.group {
		return nil, transport.Errorf(transport.Invalid, "backup of group %q sent to a node of group %s", req.Group, g.group)
	}
	if req.Offset < 0 || req.Max < 0 {
		return nil, transport.Errorf(transport.Invalid, "backup at offset %d, chunks of %d bytes", req.Offset, req.Max)
	}
	if !g.isLeader() {
		return nil, g.notLeader()
	}
	c, err := g.backups.chunk(ctx, req)
	if err != nil {
		return nil, err
	}
	return c.Encode(), nil
}

// chunk answers req from its session, opening one if needed: a request
// naming a snapshot no session holds reopens it from the store, and one
// whose snapshot is gone from there too (or names none) gets a new one,
// from offset 0.
func (b *backups) chunk(ctx context.Context, req transport.BackupRequest) (*transport.BackupChunk, error) {
	for {
		s, err := b.session(ctx, req.SnapshotID)
		if err != nil {
			return nil, err
		}
		if err := b.pace(ctx, req.Max); err != nil {
			return nil, err
		}
		if c, ok, err := b.read(s, req); ok || err != nil {
			return c, err
		}
		// Released (its idle timeout) as this request arrived: once more.
	}
}

// read answers req from s; false if s was released first.
func (b *backups) read(s *backupSession, req transport.BackupRequest) (*transport.BackupChunk, bool, error) {
	off := req.Offset
	if s.meta.ID != req.SnapshotID {
		off = 0
	}
	max := req.Max
	if max == 0 || max > transport.MaxBackupChunk {
		max = transport.MaxBackupChunk
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rc == nil {
		return nil, false, nil
	}
	s.timer.Reset(b.limits.Idle)
	if off > s.meta.Size {
		return nil, true, transport.Errorf(transport.Invalid, "backup at offset %d of snapshot %s, which has %d bytes", off, s.meta.ID, s.meta.Size)
	}
	if err := b.seek(s, off); err != nil {
		b.drop(s)
		return nil, true, transport.Errorf(transport.Internal, "backup: reading snapshot %s: %v", s.meta.ID, err)
	}
	buf := make([]byte, min(int64(max), s.meta.Size-off))
	if _, err := io.ReadFull(s.rc, buf); err != nil {
		b.drop(s)
		return nil, true, transport.Errorf(transport.Internal, "backup: reading snapshot %s at %d: %v", s.meta.ID, off, err)
	}
	s.pos += int64(len(buf))
	if s.pos == s.meta.Size {
		b.drop(s) // the last chunk: a lost answer reopens the snapshot from the store
	}
	return &transport.BackupChunk{Kind: b.kind, Group: b.group, SnapshotID: s.meta.ID, Index: s.meta.Index, Term: s.meta.Term,
		Configuration: s.config, Size: s.meta.Size, Offset: off, Data: buf}, true, nil
}

// pace waits until a chunk of at most max bytes (0: MaxBackupChunk) fits
// limits.Rate, counting it: the chunks of every backup of the node share
// one schedule.
func (b *backups) pace(ctx context.Context, max int) error {
	if b.limits.Rate <= 0 {
		return nil
	}
	if max <= 0 || max > transport.MaxBackupChunk {
		max = transport.MaxBackupChunk
	}
	b.mu.Lock()
	now := time.Now()
	b.next = later(b.next, now)
	wait := b.next.Sub(now)
	b.next = b.next.Add(time.Duration(float64(max) / float64(b.limits.Rate) * float64(time.Second)))
	b.mu.Unlock()
	if wait <= 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return transport.Errorf(transport.Timeout, "backup: waiting for --backup-rate: %v", ctx.Err())
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// seek moves s's stream to off: forward by reading, backward (an answer
// the client lost) by reopening the snapshot.
func (b *backups) seek(s *backupSession, off int64) error {
	if off < s.pos {
		_, rc, err := b.reopen(s.meta.ID)
		if err != nil {
			return err
		}
		s.rc.Close()
		s.rc, s.pos = rc, 0
	}
	if off > s.pos {
		if _, err := io.CopyN(io.Discard, s.rc, off-s.pos); err != nil {
			return err
		}
		s.pos = off
	}
	return nil
}

// session returns the session of snapshot id, or opens one.
func (b *backups) session(ctx context.Context, id string) (*backupSession, error) {
	b.mu.Lock()
	if s, ok := b.sessions[id]; ok && id != "" {
		b.mu.Unlock()
		return s, nil
	}
	switch {
	case b.closed:
		b.mu.Unlock()
		return nil, transport.Errorf(transport.Unavailable, "node is shutting down")
	case b.held >= b.limits.Max:
		b.mu.Unlock()
		return nil, transport.Errorf(transport.ResourceExhausted,
			"this node serves %d backups at once (--max-backups), and all are taken: wait for one to end, "+
				"or for an abandoned one to be released %s after its last request (--backup-idle-timeout)", b.limits.Max, b.limits.Idle)
	}
	b.held++
	b.mu.Unlock()
	var meta *raft.SnapshotMeta
	var rc io.ReadCloser
	var err error
	if id != "" {
		meta, rc, err = b.open(id)
	}
	if id == "" || err != nil {
		ctx, cancel := context.WithTimeout(ctx, backupSnapshotWait)
		meta, rc, err = b.take(ctx)
		cancel()
	}
	var config []byte
	if err == nil {
		config, err = json.Marshal(meta.Configuration)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil && b.closed {
		err = errors.New("node is shutting down")
	}
	if err != nil {
		b.held--
		if rc != nil {
			rc.Close()
		}
		return nil, transport.Errorf(transport.Unavailable, "backup: taking a snapshot of group %s: %v", b.group, err)
	}
	if s, ok := b.sessions[meta.ID]; ok { // two requests opened it at once: keep one
		b.held--
		rc.Close()
		return s, nil
	}
	s := &backupSession{meta: meta, config: config, rc: rc}
	s.timer = time.AfterFunc(b.limits.Idle, func() { b.expire(s) })
	b.sessions[meta.ID] = s
	return s, nil
}

// expire releases s after its idle timeout.
func (b *backups) expire(s *backupSession) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b.drop(s)
}

// drop forgets s and releases its snapshot; s.mu is held.
func (b *backups) drop(s *backupSession) {
	b.mu.Lock()
	if b.sessions[s.meta.ID] == s {
		delete(b.sessions, s.meta.ID)
		b.held--
	}
	b.mu.Unlock()
	s.closeStream()
}

// release releases s's snapshot.
func (s *backupSession) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closeStream()
}

func (s *backupSession) closeStream() {
	if s.rc != nil {
		s.timer.Stop()
		s.rc.Close()
		s.rc = nil
	}
}
