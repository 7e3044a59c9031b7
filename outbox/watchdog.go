package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/internal/wait"
)

// ErrLeaseHeld means another Outbox holds the watchdog's lease: it is the
// one that resends.
var ErrLeaseHeld = errors.New("outbox: the watchdog lease is held by another owner")

// leaseName is the one lease row: every Outbox on a database shares
// qmq_outbox, so one watchdog resends at a time.
const leaseName = "qmq_outbox"

// RunWatchdog resends what is left in the outbox until ctx ends: every
// Period it takes or renews the lease, and if it holds it, runs a Sweep.
// It releases the lease when ctx ends, so that another watchdog takes
// over at its next period rather than after LeaseTTL, and returns nil.
// It returns ErrClosed once the Outbox is closed.
func (ob *Outbox) RunWatchdog(ctx context.Context) error {
	defer ob.releaseLease()
	for {
		if ob.isClosed() {
			return ErrClosed
		}
		if _, err := ob.Sweep(ctx); err != nil && !errors.Is(err, ErrLeaseHeld) && ctx.Err() == nil {
			ob.log.Warn("outbox sweep failed", "error", err)
		}
		if !wait.Sleep(ctx, ob.cfg.Period) {
			return nil
		}
	}
}

// Sweep takes or renews the watchdog's lease and, holding it, resends the
// rows older than Grace, oldest first, in pages of at most Batch rows and
// MaxPendingBytes bytes, deleting each when it is acknowledged; the lease
// is renewed before each page. A row that cannot be decoded or that the
// Producer refuses is logged and skipped, and so is one whose send fails
// or that a broker refuses (it is tried again at the next sweep); the
// sweep stops at the first page whose every send failed other than by a
// broker's refusal (the broker is likely down: the next period tries
// again), so rows a broker refuses do not hold up the rows behind them. It returns how many rows it sent and deleted;
// ErrLeaseHeld when another owner holds the lease.
func (ob *Outbox) Sweep(ctx context.Context) (int, error) {
	if ob.isClosed() {
		return 0, ErrClosed
	}
	cutoff := time.Now().Add(-ob.cfg.Grace).UnixMilli()
	after := rowKey{createdAt: math.MinInt64}
	sent := 0
	for {
		if err := ob.takeLease(ctx); err != nil {
			return sent, err
		}
		p, err := ob.page(ctx, cutoff, after)
		if err != nil {
			return sent, err
		}
		if claimed := ob.claim(p.msgs); len(claimed) > 0 {
			n, refused, err := ob.send(claimed)
			sent += n
			if n == 0 && refused == 0 && err != nil {
				return sent, err
			}
		}
		if !p.more {
			return sent, nil
		}
		after = p.last
	}
}

// rowKey is where a row of qmq_outbox stands in the watchdog's order.
type rowKey struct {
	createdAt int64
	id        string
}

// page is what the watchdog read of qmq_outbox at once.
type page struct {
	msgs []outgoing // the rows that decoded and that the Producer takes
	last rowKey     // the last row read, sendable or not
	more bool       // the page stopped at Batch or at MaxPendingBytes
}

// page reads the rows created at or before cutoff and after the key
// after, in (created_at, id) order, up to Batch rows and, past the first,
// up to MaxPendingBytes bytes of payload, decoding each as it is read. A
// row that does not decode or that the Producer refuses is logged and
// left in the table.
func (ob *Outbox) page(ctx context.Context, cutoff int64, after rowKey) (page, error) {
	q := ob.d.rebind("SELECT id, payload, created_at FROM qmq_outbox WHERE created_at <= ? AND " +
		"(created_at > ? OR (created_at = ? AND id > ?)) ORDER BY created_at, id LIMIT ?")
	rs, err := ob.db.QueryContext(ctx, q, cutoff, after.createdAt, after.createdAt, after.id, ob.cfg.Batch)
	if err != nil {
		return page{}, fmt.Errorf("outbox: read rows to resend: %w", err)
	}
	defer rs.Close()
	var p page
	rows, bytes := 0, 0
	for rs.Next() {
		var k rowKey
		var payload []byte
		if err := rs.Scan(&k.id, &payload, &k.createdAt); err != nil {
			return page{}, fmt.Errorf("outbox: read rows to resend: %w", err)
		}
		if rows > 0 && bytes+len(payload) > ob.cfg.MaxPendingBytes {
			p.more = true // this row starts the next page
			return p, nil
		}
		rows, bytes, p.last = rows+1, bytes+len(payload), k
		m := new(qmq.Message)
		err := m.UnmarshalBinary(payload)
		if err == nil {
			err = ob.s.Check(m)
		}
		if err != nil {
			ob.log.Error("outbox row cannot be sent: left in the table", "id", k.id, "error", err)
			continue
		}
		p.msgs = append(p.msgs, outgoing{m, len(payload)})
	}
	if err := rs.Err(); err != nil {
		return page{}, fmt.Errorf("outbox: read rows to resend: %w", err)
	}
	p.more = rows == ob.cfg.Batch
	return p, nil
}

// takeLease takes the lease if it has expired or is absent, or renews it
// if it is this Outbox's, until LeaseTTL from now; ErrLeaseHeld if another
// owner holds it.
func (ob *Outbox) takeLease(ctx context.Context) error {
	now := time.Now()
	until := now.Add(ob.cfg.LeaseTTL).UnixMilli()
	// renewals changes in every update, so that the rows affected count
	// a renewal within the same millisecond on a database that counts
	// changed rows, not matched ones (MySQL's default).
	n, err := execCount(ctx, ob.db, ob.d.rebind("UPDATE qmq_outbox_lease SET owner = ?, expires_at = ?, renewals = renewals + 1 "+
		"WHERE name = ? AND (owner = ? OR expires_at < ?)"), ob.cfg.Owner, until, leaseName, ob.cfg.Owner, now.UnixMilli())
	if err == nil && n == 0 {
		n, err = execCount(ctx, ob.db, ob.d.rebind(ob.d.InsertIgnore("qmq_outbox_lease", []string{"name", "owner", "expires_at", "renewals"})),
			leaseName, ob.cfg.Owner, until, 0)
	}
	if err != nil {
		return fmt.Errorf("outbox: take lease: %w", err)
	}
	if n == 1 {
		return nil
	}
	var owner string
	var expires int64
	err = ob.db.QueryRowContext(ctx, ob.d.rebind("SELECT owner, expires_at FROM qmq_outbox_lease WHERE name = ?"), leaseName).Scan(&owner, &expires)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("outbox: take lease: %w", err)
	}
	return fmt.Errorf("%w: %s, until %s", ErrLeaseHeld, owner, time.UnixMilli(expires).UTC().Format(time.RFC3339Nano))
}

// releaseLease gives the lease up if this Outbox holds it.
func (ob *Outbox) releaseLease() {
	ctx, cancel := context.WithTimeout(context.Background(), ob.cfg.SendTimeout)
	defer cancel()
	_, err := ob.db.ExecContext(ctx, ob.d.rebind("UPDATE qmq_outbox_lease SET expires_at = 0 WHERE name = ? AND owner = ?"),
		leaseName, ob.cfg.Owner)
	if err != nil {
		ob.log.Warn("outbox lease release failed: another watchdog takes over when it expires", "error", err)
	}
}
