package backup

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/qmqgo/qmq/transport"
)

// Source answers backup requests: a group's leader, through package admin.
type Source interface {
	Backup(ctx context.Context, req transport.BackupRequest) (*transport.BackupChunk, error)
}

// FetchOptions tune Fetch.
type FetchOptions struct {
	// Max bounds each chunk's bytes. Default (0): MaxChunk.
	Max int
	// StopAfter, if positive, stops after that many chunks, leaving the
	// partial file to be resumed (ErrStopped): a test's interruption.
	StopAfter int
	// Say, if set, is told what Fetch decided (a resume, a restart).
	Say func(format string, args ...any)
}

// ErrStopped is Fetch's error after FetchOptions.StopAfter chunks.
var ErrStopped = errors.New("backup: stopped before the end, as asked")

// Fetched is what Fetch wrote.
type Fetched struct {
	// Header is the snapshot's, once its first chunk is in.
	Header *Header
	// ResumedAt is the snapshot offset a partial file was continued
	// from; 0 for a backup taken from the start.
	ResumedAt int64
	// Restarted says why a partial file was not continued ("" if none was
	// found, or it was).
	Restarted string
	Chunks    int
}

// Fetch takes a backup of group from src into path: it continues
// path+PartialSuffix if there is one whose snapshot src still holds, or
// starts over, and renames the file to path once it is whole and durable.
// On an error the partial file is left, fsynced, for the next run.
func Fetch(ctx context.Context, src Source, group, path string, opt FetchOptions) (*Fetched, error) {
	if opt.Max <= 0 || opt.Max > MaxChunk {
		opt.Max = MaxChunk
	}
	say := opt.Say
	if say == nil {
		say = func(string, ...any) {}
	}
	out := &Fetched{}
	var w *Writer
	resumed := false // w is a partial file, its first answer not yet in
	req := transport.BackupRequest{Group: group, Max: opt.Max}
	if _, err := os.Stat(path + PartialSuffix); err == nil {
		pw, err := Resume(path)
		switch {
		case err != nil:
			out.Restarted = fmt.Sprintf("the partial file %s%s is unusable (%v): starting over", path, PartialSuffix, err)
		case pw.Header().Group != group:
			pw.Close()
			out.Restarted = fmt.Sprintf("the partial file %s%s is of group %s: starting over", path, PartialSuffix, pw.Header().Group)
		default:
			w, resumed = pw, true
			req.SnapshotID, req.Offset = w.Header().SnapshotID, w.Written()
		}
		if out.Restarted != "" {
			say("%s", out.Restarted)
		}
	}
	defer func() {
		if w != nil {
			w.Close()
		}
	}()
	for w == nil || w.Written() < w.Header().Size {
		c, err := src.Backup(ctx, req)
		if err != nil {
			return out, err
		}
		if c.Group != group {
			return out, fmt.Errorf("backup: asked for group %s, the answer is of %s", group, c.Group)
		}
		if w != nil && c.SnapshotID != w.Header().SnapshotID {
			// The leader no longer holds the partial file's snapshot (it
			// changed, or restarted, or reaped it): a new one, from 0.
			out.Restarted = fmt.Sprintf("snapshot %s of the partial file is no longer held by the leader: starting over from snapshot %s",
				w.Header().SnapshotID, c.SnapshotID)
			say("%s", out.Restarted)
			if err := w.Discard(); err != nil {
				return out, err
			}
			w = nil
		}
		if w != nil && resumed {
			out.ResumedAt = req.Offset
			say("continuing %s%s at byte %d of snapshot %s (%d bytes)", path, PartialSuffix, req.Offset, c.SnapshotID, c.Size)
		}
		resumed = false
		if w == nil {
			if c.Offset != 0 {
				return out, fmt.Errorf("backup: a new snapshot's first chunk at offset %d", c.Offset)
			}
			if w, err = Create(path, headerOf(c)); err != nil {
				return out, err
			}
		}
		if c.Offset != w.Written() || c.Size != w.Header().Size {
			return out, fmt.Errorf("backup: asked for byte %d of %d, answered %d of %d", w.Written(), w.Header().Size, c.Offset, c.Size)
		}
		if len(c.Data) == 0 && w.Written() < c.Size {
			return out, fmt.Errorf("backup: an empty chunk at byte %d of %d", c.Offset, c.Size)
		}
		if len(c.Data) > 0 {
			if err := w.Write(c.Data); err != nil {
				return out, err
			}
			out.Chunks++
		}
		out.Header = w.Header()
		req.SnapshotID, req.Offset = c.SnapshotID, w.Written()
		if opt.StopAfter > 0 && out.Chunks >= opt.StopAfter && w.Written() < c.Size {
			return out, ErrStopped
		}
	}
	out.Header = w.Header()
	err := w.Finish()
	w = nil
	return out, err
}
