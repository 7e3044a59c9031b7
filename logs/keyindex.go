package logs

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// ErrIndexBuilding means a segment's key index is still being built (or
// verified) after open: the lookup cannot tell yet whether the key is
// there. It is not "not found"; ask again later.
var ErrIndexBuilding = errors.New("logs: key index is being built")

// Sidecar file of one sealed segment (little-endian):
//
//	magic "QMQX" | version u8 | reserved 3 | base u64 | size u64 |
//	count u32 | crc32c u32 (of everything but itself) |
//	fanout: 256 × u32, cumulative entry counts by the key's top byte |
//	entries, sorted by (key bits 63..24, offset): fingerprint u32 (key
//	bits 55..24) | offset u32 (relative to base)
const (
	indexHeaderSize = 32
	indexFanoutSize = 256 * 4
	indexEntrySize  = 8
	indexVersion    = 1
	indexSuffix     = ".idx"
)

var indexMagic = [4]byte{'Q', 'M', 'Q', 'X'}

// KeyIndex indexes the records of a Log by 64-bit keys, so that a record
// is found by key for as long as it is retained. The active segment's
// entries are held in memory; a sealed segment's are in a sidecar file of
// 8 bytes an entry, of which only the 1 KiB fan-out table stays in memory.
// Fingerprints may collide: Lookup returns candidates, which the caller
// confirms by reading the record. One goroutine (the log's writer) calls
// Add, Retain and Close; Lookup and Stats are safe on any goroutine.
type KeyIndex struct {
	log  *Log
	dir  string
	keys func(payload []byte, add func(key uint64))

	mu         sync.RWMutex
	activeBase int64
	akeys      []uint64 // the active segment's keys, in offset order
	arels      []uint32 // their offsets relative to activeBase
	sealed     []*sealedIndex
	diskBytes  int64

	work    chan struct{}
	queue   []*sealedIndex // written or verified by the background goroutine
	closing bool
	wg      sync.WaitGroup
}

// indexEntry is one sidecar entry: the key's top 40 bits (the fan-out
// byte and the fingerprint) and the record's offset relative to its segment.
type indexEntry struct {
	hi  uint64 // key >> 24
	rel uint32
}

func sortEntries(es []indexEntry) {
	slices.SortFunc(es, func(a, b indexEntry) int {
		if a.hi != b.hi {
			return cmp.Compare(a.hi, b.hi)
		}
		return cmp.Compare(a.rel, b.rel)
	})
}

// sealedIndex is the index of one sealed segment.
type sealedIndex struct {
	base, size int64
	fanout     *[256]uint32 // nil until the sidecar is written or verified
	entries    []indexEntry // in offset order, until written
	verify     bool         // the sidecar is to be verified (rebuilt if bad)
	gone       bool         // retention removed the segment
	err        error        // why its rebuild failed: its lookups fail with it until the log is opened again
}

// OpenKeyIndex opens the key index of l in dir, after the owner has cut l
// back to its durable end. It rebuilds the active segment's entries by
// scanning it, removes sidecars of segments l no longer has, and verifies
// every sealed segment's sidecar in the background, rebuilding it if it is
// missing or bad; until then Lookup reports ErrIndexBuilding. keys extracts
// a record's keys, as Add was given them.
func OpenKeyIndex(l *Log, dir string, keys func(payload []byte, add func(key uint64))) (*KeyIndex, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("logs: create %s: %w", dir, err)
	}
	ki := &KeyIndex{log: l, dir: dir, keys: keys, work: make(chan struct{}, 1)}
	segs := l.segments()
	a := segs[len(segs)-1]
	ki.activeBase = a.base
	keep := map[int64]bool{}
	for _, s := range segs[:len(segs)-1] {
		keep[s.base] = true
		si := &sealedIndex{base: s.base, size: s.size, verify: true}
		ki.sealed = append(ki.sealed, si)
		ki.queue = append(ki.queue, si)
	}
	if err := ki.removeStale(keep); err != nil {
		return nil, err
	}
	if _, bad, err := l.scanSegment(a, a.base, l.End(), func(off int64, p []byte) error {
		keys(p, func(k uint64) { ki.Add(off, k) })
		return nil
	}); err != nil || bad != nil {
		return nil, errors.Join(err, bad)
	}
	ki.wg.Add(1)
	go ki.run()
	ki.wake()
	return ki, nil
}

// removeStale removes the sidecars (and temporary files) of segments not in keep.
func (ki *KeyIndex) removeStale(keep map[int64]bool) error {
	entries, err := os.ReadDir(ki.dir)
	if err != nil {
		return fmt.Errorf("logs: list %s: %w", ki.dir, err)
	}
	for _, e := range entries {
		base, ok := parseIndexName(e.Name())
		if ok && keep[base] || e.IsDir() {
			continue // a directory is nobody's sidecar: left alone, never a reason not to open
		}
		if err := os.Remove(filepath.Join(ki.dir, e.Name())); err != nil {
			return fmt.Errorf("logs: remove stale index: %w", err)
		}
	}
	return nil
}

func indexName(base int64) string { return fmt.Sprintf("%020d%s", base, indexSuffix) }

func parseIndexName(name string) (int64, bool) {
	digits, ok := strings.CutSuffix(name, indexSuffix)
	if !ok || len(digits) != 20 {
		return 0, false
	}
	base, err := strconv.ParseInt(digits, 10, 64)
	return base, err == nil && base >= 0
}

// Add indexes key for the record at offset off, just appended. Records
// must be added in offset order; a record may have several keys. When off
// lies in a newer segment than the last Add's, the previous segment is
// sealed: its entries are sorted and written to its sidecar in the
// background. Writer only.
func (ki *KeyIndex) Add(off int64, key uint64) {
	if a := ki.log.active(); a.base != ki.activeBase && off >= a.base {
		ki.seal(a.base)
	}
	ki.mu.Lock()
	ki.akeys = append(ki.akeys, key)
	ki.arels = append(ki.arels, uint32(off-ki.activeBase))
	ki.mu.Unlock()
}

// seal makes the active entries a sealed segment's and starts newBase's.
func (ki *KeyIndex) seal(newBase int64) {
	segs := ki.log.segments()
	si := &sealedIndex{base: ki.activeBase, size: newBase - ki.activeBase}
	if s := segmentFor(segs, ki.activeBase); s != nil && s.base == ki.activeBase {
		si.size = s.size
	}
	si.entries = make([]indexEntry, len(ki.akeys))
	for i, k := range ki.akeys {
		si.entries[i] = indexEntry{k >> 24, ki.arels[i]}
	}
	// In offset order: the background writer sorts its own copy, so that
	// the apply goroutine that seals never pays for the sort.
	ki.mu.Lock()
	ki.sealed = append(ki.sealed, si)
	ki.queue = append(ki.queue, si)
	ki.activeBase = newBase
	ki.akeys, ki.arels = ki.akeys[:0], ki.arels[:0]
	ki.mu.Unlock()
	ki.wake()
}

func (ki *KeyIndex) wake() {
	select {
	case ki.work <- struct{}{}:
	default:
	}
}

// run writes and verifies sidecars until Close.
func (ki *KeyIndex) run() {
	defer ki.wg.Done()
	for range ki.work {
		for {
			ki.mu.Lock()
			if len(ki.queue) == 0 {
				closing := ki.closing
				ki.mu.Unlock()
				if closing {
					return
				}
				break
			}
			si := ki.queue[0]
			ki.queue = ki.queue[1:]
			stop := ki.closing && si.verify
			ki.mu.Unlock()
			if !stop {
				ki.build(si)
			}
		}
	}
}

// build verifies si's sidecar or (re)writes it, then publishes its fan-out.
// A sidecar that cannot be written leaves a new segment's entries in
// memory, where lookups find them; a segment that cannot be rebuilt is
// marked failed, and its lookups say why (not ErrIndexBuilding) until the
// log is opened again.
func (ki *KeyIndex) build(si *sealedIndex) {
	path := filepath.Join(ki.dir, indexName(si.base))
	// Set before si was queued, in offset order, and read by lookups
	// until publish clears it: the sidecar is written from a sorted copy.
	entries := slices.Clone(si.entries)
	sortEntries(entries)
	if si.verify {
		if b, err := os.ReadFile(path); err == nil {
			if fan, err := decodeKeyIndex(b, si.base, si.size); err == nil {
				ki.publish(si, fan, int64(len(b)), "")
				return
			}
		}
		var err error
		if entries, err = ki.rebuild(si); err != nil {
			if !errors.Is(err, errIndexStop) && !errors.Is(err, ErrRetained) {
				ki.mu.Lock()
				si.err = err
				ki.mu.Unlock()
			}
			return
		}
	}
	b := encodeKeyIndex(si.base, si.size, entries)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		os.Remove(tmp)
		ki.keepInMemory(si, entries, err)
		return
	}
	fan, _ := decodeKeyIndex(b, si.base, si.size)
	ki.publish(si, fan, int64(len(b)), tmp)
}

// publish renames tmp (if any) into place and makes si's fan-out visible,
// unless retention removed the segment meanwhile.
func (ki *KeyIndex) publish(si *sealedIndex, fan *[256]uint32, size int64, tmp string) {
	ki.mu.Lock()
	defer ki.mu.Unlock()
	path := filepath.Join(ki.dir, indexName(si.base))
	if si.gone {
		os.Remove(tmp)
		os.Remove(path)
		return
	}
	if tmp != "" {
		if err := os.Rename(tmp, path); err != nil {
			os.Remove(tmp)
			ki.keepLocked(si, nil, err)
			return
		}
	}
	si.fanout, si.entries = fan, nil
	ki.diskBytes += size
}

// keepInMemory keeps si's entries in memory when its sidecar could not be
// written (a rebuilt segment has none there yet: it is given them), so its
// lookups go on.
func (ki *KeyIndex) keepInMemory(si *sealedIndex, entries []indexEntry, err error) {
	ki.mu.Lock()
	defer ki.mu.Unlock()
	ki.keepLocked(si, entries, err)
}

func (ki *KeyIndex) keepLocked(si *sealedIndex, entries []indexEntry, err error) {
	if si.entries != nil || si.gone {
		return // a new segment's, in offset order: lookups read them
	}
	if entries == nil {
		si.err = err
		return
	}
	// Lookups read entries in offset order.
	byOffset := slices.Clone(entries)
	slices.SortFunc(byOffset, func(a, b indexEntry) int { return cmp.Compare(a.rel, b.rel) })
	si.entries = byOffset
}

var errIndexStop = errors.New("logs: key index closing")

// rebuild scans si's segment for its entries.
func (ki *KeyIndex) rebuild(si *sealedIndex) ([]indexEntry, error) {
	s := segmentFor(ki.log.segments(), si.base)
	if s == nil || s.base != si.base {
		return nil, ErrRetained
	}
	var out []indexEntry
	_, bad, err := ki.log.scanSegment(s, s.base, s.base+si.size, func(off int64, p []byte) error {
		ki.mu.RLock()
		stop := ki.closing || si.gone
		ki.mu.RUnlock()
		if stop {
			return errIndexStop
		}
		ki.keys(p, func(k uint64) { out = append(out, indexEntry{k >> 24, uint32(off - s.base)}) })
		return nil
	})
	if err != nil || bad != nil {
		return nil, errors.Join(err, bad)
	}
	sortEntries(out)
	return out, nil
}

// Retain forgets the sealed segments the log no longer has (after
// RemoveBefore) and removes their sidecars. Writer only.
func (ki *KeyIndex) Retain() error {
	start := ki.log.Start()
	ki.mu.Lock()
	defer ki.mu.Unlock()
	var errs []error
	n := 0
	for n < len(ki.sealed) && ki.sealed[n].base < start {
		si := ki.sealed[n]
		si.gone = true
		if si.fanout != nil {
			ki.diskBytes -= indexFileSize(si.fanout[255])
		}
		if err := os.Remove(filepath.Join(ki.dir, indexName(si.base))); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("logs: remove index: %w", err))
		}
		n++
	}
	ki.sealed = slices.Delete(slices.Clone(ki.sealed), 0, n)
	return errors.Join(errs...)
}

func indexFileSize(count uint32) int64 {
	return indexHeaderSize + indexFanoutSize + int64(count)*indexEntrySize
}

// Lookup calls fn with the offset of every record that may have key,
// newest first, until fn returns false. A segment whose index is not built
// yet makes it return ErrIndexBuilding after visiting the newer ones.
func (ki *KeyIndex) Lookup(key uint64, fn func(off int64) bool) error {
	ki.mu.RLock()
	base := ki.activeBase
	var active []int64
	for i := len(ki.akeys) - 1; i >= 0; i-- {
		if ki.akeys[i] == key {
			active = append(active, base+int64(ki.arels[i]))
		}
	}
	type view struct {
		base, size int64
		fanout     *[256]uint32
		entries    []indexEntry
		err        error
	}
	sealed := make([]view, len(ki.sealed))
	for i, si := range ki.sealed {
		sealed[i] = view{si.base, si.size, si.fanout, si.entries, si.err}
	}
	ki.mu.RUnlock()
	for _, off := range active {
		if !fn(off) {
			return nil
		}
	}
	want := key >> 24
	for i := len(sealed) - 1; i >= 0; i-- {
		v := sealed[i]
		var rels []uint32
		switch {
		case v.fanout != nil:
			var err error
			if rels, err = ki.readBucket(v.base, v.size, v.fanout, key); err != nil {
				return err
			}
		case v.entries != nil: // sealed, its sidecar not written yet: in offset order
			for _, e := range v.entries {
				if e.hi == want {
					rels = append(rels, e.rel)
				}
			}
		case v.err != nil:
			return fmt.Errorf("logs: the index of segment %d could not be rebuilt (it is tried again when the node restarts): %w", v.base, v.err)
		default:
			return fmt.Errorf("%w: segment %d", ErrIndexBuilding, v.base)
		}
		for j := len(rels) - 1; j >= 0; j-- {
			if !fn(v.base + int64(rels[j])) {
				return nil
			}
		}
	}
	return nil
}

// readBucket reads the entries of key's top byte from the sidecar of the
// segment at base and returns the offsets (ascending) whose fingerprint is key's.
func (ki *KeyIndex) readBucket(base, size int64, fan *[256]uint32, key uint64) ([]uint32, error) {
	top := key >> 56
	lo := uint32(0)
	if top > 0 {
		lo = fan[top-1]
	}
	hi := fan[top]
	if hi == lo {
		return nil, nil
	}
	f, err := os.Open(filepath.Join(ki.dir, indexName(base)))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil // removed by retention since the lookup began
	}
	if err != nil {
		return nil, fmt.Errorf("logs: key index: %w", err)
	}
	defer f.Close()
	b := make([]byte, int(hi-lo)*indexEntrySize)
	if _, err := f.ReadAt(b, indexHeaderSize+indexFanoutSize+int64(lo)*indexEntrySize); err != nil {
		return nil, fmt.Errorf("logs: key index %s: %w", f.Name(), err)
	}
	fp := uint32(key >> 24)
	var out []uint32
	for i := 0; i < len(b); i += indexEntrySize {
		if binary.LittleEndian.Uint32(b[i:]) == fp {
			if rel := binary.LittleEndian.Uint32(b[i+4:]); int64(rel) < size {
				out = append(out, rel)
			}
		}
	}
	return out, nil
}

// KeyIndexStats is what an index holds.
type KeyIndexStats struct {
	ActiveEntries int   // entries of the active segment, in memory
	MemoryBytes   int64 // active entries (12 bytes each), fan-outs, sidecars not yet written
	DiskBytes     int64 // sidecar files
	Segments      int   // sealed segments indexed or being indexed
	Failed        int   // sealed segments whose index could not be rebuilt (see Lookup)
}

// Stats describes the index now.
func (ki *KeyIndex) Stats() KeyIndexStats {
	ki.mu.RLock()
	defer ki.mu.RUnlock()
	st := KeyIndexStats{ActiveEntries: len(ki.akeys), DiskBytes: ki.diskBytes, Segments: len(ki.sealed)}
	st.MemoryBytes = int64(cap(ki.akeys))*8 + int64(cap(ki.arels))*4
	for _, si := range ki.sealed {
		st.MemoryBytes += 64 + int64(cap(si.entries))*16
		if si.fanout != nil {
			st.MemoryBytes += indexFanoutSize
		}
		if si.err != nil {
			st.Failed++
		}
	}
	return st
}

// Ready reports whether every sealed segment is indexed: no Lookup
// returns ErrIndexBuilding.
func (ki *KeyIndex) Ready() bool {
	ki.mu.RLock()
	defer ki.mu.RUnlock()
	for _, si := range ki.sealed {
		if si.fanout == nil && si.entries == nil {
			return false
		}
	}
	return true
}

// Close writes the sidecars of segments sealed so far, stops verifying
// the others (the next open does) and waits for the background goroutine.
func (ki *KeyIndex) Close() {
	ki.mu.Lock()
	if ki.closing {
		ki.mu.Unlock()
		return
	}
	ki.closing = true
	ki.mu.Unlock()
	ki.wake()
	ki.wg.Wait()
}

// Path returns the sidecar file of the sealed segment at base.
func (ki *KeyIndex) Path(base int64) string { return filepath.Join(ki.dir, indexName(base)) }

// encodeKeyIndex returns the sidecar of the segment at base of size bytes
// whose sorted entries are entries.
func encodeKeyIndex(base, size int64, entries []indexEntry) []byte {
	b := make([]byte, indexHeaderSize+indexFanoutSize+len(entries)*indexEntrySize)
	copy(b, indexMagic[:])
	b[4] = indexVersion
	binary.LittleEndian.PutUint64(b[8:], uint64(base))
	binary.LittleEndian.PutUint64(b[16:], uint64(size))
	binary.LittleEndian.PutUint32(b[24:], uint32(len(entries)))
	var fan [256]uint32
	for _, e := range entries {
		fan[e.hi>>32]++
	}
	var sum uint32
	for i := range fan {
		sum += fan[i]
		binary.LittleEndian.PutUint32(b[indexHeaderSize+4*i:], sum)
	}
	p := b[indexHeaderSize+indexFanoutSize:]
	for i, e := range entries {
		binary.LittleEndian.PutUint32(p[i*8:], uint32(e.hi))
		binary.LittleEndian.PutUint32(p[i*8+4:], e.rel)
	}
	binary.LittleEndian.PutUint32(b[28:], indexChecksum(b))
	return b
}

func indexChecksum(b []byte) uint32 {
	return checksum(append(append([]byte(nil), b[:28]...), b[indexHeaderSize:]...))
}

// decodeKeyIndex checks the sidecar b of the segment at base of size bytes
// and returns its fan-out table.
func decodeKeyIndex(b []byte, base, size int64) (*[256]uint32, error) {
	if len(b) < indexHeaderSize+indexFanoutSize {
		return nil, fmt.Errorf("%w: key index of %d bytes", ErrCorrupt, len(b))
	}
	switch {
	case [4]byte(b[:4]) != indexMagic:
		return nil, fmt.Errorf("%w: key index: bad magic", ErrCorrupt)
	case b[4] != indexVersion:
		return nil, fmt.Errorf("%w: key index: version %d", ErrCorrupt, b[4])
	case int64(binary.LittleEndian.Uint64(b[8:])) != base:
		return nil, fmt.Errorf("%w: key index: base does not match", ErrCorrupt)
	case int64(binary.LittleEndian.Uint64(b[16:])) != size:
		return nil, fmt.Errorf("%w: key index: covers a segment of another size", ErrCorrupt)
	}
	count := binary.LittleEndian.Uint32(b[24:])
	if int64(len(b)) != indexFileSize(count) {
		return nil, fmt.Errorf("%w: key index: %d bytes for %d entries", ErrCorrupt, len(b), count)
	}
	if indexChecksum(b) != binary.LittleEndian.Uint32(b[28:]) {
		return nil, fmt.Errorf("%w: key index: checksum mismatch", ErrCorrupt)
	}
	var fan [256]uint32
	var prev uint32
	for i := range fan {
		fan[i] = binary.LittleEndian.Uint32(b[indexHeaderSize+4*i:])
		if fan[i] < prev {
			return nil, fmt.Errorf("%w: key index: fan-out decreases", ErrCorrupt)
		}
		prev = fan[i]
	}
	if fan[255] != count {
		return nil, fmt.Errorf("%w: key index: fan-out counts %d of %d entries", ErrCorrupt, fan[255], count)
	}
	return &fan, nil
}
