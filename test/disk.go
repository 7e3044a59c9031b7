package test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// UseSmallDisks gives every node started from now on a data disk of size
// bytes, which Node.FillDisk fills: a tmpfs mounted on the node's data
// directory where this process may mount one (root, or CAP_SYS_ADMIN),
// so that writes meet a real full file system; otherwise the node's data
// directory as it is, with the free space its probe reports capped
// through qmqd --disk-free-file (the node refuses sends and waits before
// applying alike, but no write meets ENOSPC). SmallDisksReal says which.
// Either way the node gets a --disk-free-file, empty (no cap) unless
// FillDisk or CapDiskFree writes it.
func (c *Cluster) UseSmallDisks(size int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.smallDisk = size
}

// SmallDisksReal reports whether the cluster's small disks are real file
// systems (tmpfs) rather than fault injection; meaningful once a node has
// started.
func (c *Cluster) SmallDisksReal() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tmpfs
}

// smallDisk gives a node starting for the first time its small disk.
func (n *Node) smallDisk(size int64) {
	c := n.c
	if err := os.MkdirAll(n.DataDir, 0o755); err != nil {
		c.t.Fatal(err)
	}
	n.DiskFreeFile = filepath.Join(filepath.Dir(n.LogPath), "disk-free")
	sweepStaleMounts(c.t)
	err := unix.Mount("tmpfs", n.DataDir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0755", size))
	if err == nil {
		recordMount(c.t, n.DataDir)
		n.mounted = true
		c.mu.Lock()
		c.tmpfs = true
		c.mu.Unlock()
		return
	}
	if !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EACCES) {
		c.t.Fatalf("mounting a tmpfs on %s: %v", n.DataDir, err)
	}
	c.t.Logf("%s: no tmpfs (%v): its disk fills by fault injection (--disk-free-file)", n.ID, err)
}

// mountsDir keeps, per test process, the tmpfs mounts it made: a test
// process killed (or timed out) before its cleanups leaves them mounted,
// holding memory, and the next one to mount sweeps them.
var mountsDir = filepath.Join(os.TempDir(), "qmq-test-mounts")

// recordMount notes a mount of this process's.
func recordMount(t testing.TB, path string) {
	if err := os.MkdirAll(mountsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(mountsDir, strconv.Itoa(os.Getpid())), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fmt.Fprintln(f, path)
}

// sweepStaleMounts detaches the mounts recorded by test processes that are
// gone.
func sweepStaleMounts(t testing.TB) {
	entries, _ := os.ReadDir(mountsDir)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() || unix.Kill(pid, 0) != unix.ESRCH {
			continue
		}
		list := filepath.Join(mountsDir, e.Name())
		b, _ := os.ReadFile(list)
		for _, path := range strings.Fields(string(b)) {
			if err := unix.Unmount(path, unix.MNT_DETACH); err == nil {
				t.Logf("detached %s, left mounted by test process %d", path, pid)
			}
		}
		os.Remove(list)
	}
}

// unmount detaches the node's tmpfs, if it has one; the kernel frees it
// once the node's process, if any, is gone.
func (n *Node) unmount() error {
	if !n.mounted {
		return nil
	}
	if err := unix.Unmount(n.DataDir, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("unmounting %s: %w", n.DataDir, err)
	}
	n.mounted = false
	return nil
}

// fillFile is where FillDisk puts its bytes, beside the node's data.
func (n *Node) fillFile() string { return filepath.Join(n.DataDir, "chaos-fill") }

// FillDisk leaves the node's small disk (UseSmallDisks) with about leave
// bytes free, as if another program had filled it, and says what it did.
// It allocates in chunks, measuring the free space again before each: the
// node writes meanwhile, and one allocation of everything could take the
// space the node was about to use, or, failing, start over for ever.
func (n *Node) FillDisk(leave int64) string {
	t := n.c.t
	t.Helper()
	if n.DiskFreeFile == "" {
		t.Fatalf("node %s has no small disk", n.ID)
	}
	if !n.mounted {
		n.CapDiskFree(leave)
		return fmt.Sprintf("%s's disk made to look %d MiB from full", n.ID, leave>>20)
	}
	f, err := os.OpenFile(n.fillFile(), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	size, free := int64(0), int64(0)
	if st, err := f.Stat(); err == nil {
		size = st.Size()
	}
	const chunk = 64 << 20
	for range 10000 { // bounded: the loop ends long before
		var st unix.Statfs_t
		if err := unix.Statfs(n.DataDir, &st); err != nil {
			t.Fatal(err)
		}
		free = int64(st.Bavail) * st.Bsize
		want := min(free-leave, chunk)
		if want < 64<<10 {
			break
		}
		switch err := unix.Fallocate(int(f.Fd()), 0, size, want); {
		case err == nil:
			size += want
		case errors.Is(err, unix.ENOSPC):
			// The node took some meanwhile, or the file system needs a page
			// of its own: measure again.
		default:
			t.Fatalf("filling %s: %v", n.fillFile(), err)
		}
	}
	return fmt.Sprintf("%s's disk filled to %d MiB free (%d MiB written)", n.ID, free>>20, size>>20)
}

// EmptyDisk undoes FillDisk.
func (n *Node) EmptyDisk() {
	t := n.c.t
	t.Helper()
	if !n.mounted {
		n.CapDiskFree(-1)
		return
	}
	if err := os.Remove(n.fillFile()); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
}

// CapDiskFree makes the node on a small disk (UseSmallDisks) see at most
// free bytes free on its data disk, whatever it holds (qmqd
// --disk-free-file, read every 100 ms, and at start); a negative free
// lifts the cap.
func (n *Node) CapDiskFree(free int64) {
	t := n.c.t
	t.Helper()
	if n.DiskFreeFile == "" {
		t.Fatalf("node %s has no small disk", n.ID)
	}
	var b []byte
	if free >= 0 {
		b = []byte(strconv.FormatInt(free, 10))
	}
	if err := os.WriteFile(n.DiskFreeFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
