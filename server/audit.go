package server

import (
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/qmqgo/qmq/internal/lograte"
	"github.com/qmqgo/qmq/transport"
)

// auditLog records, in the node's log under the name "audit", every admin
// operation (who, from where, the request) and every refused request
// (who, from where, what was refused and why), and every read of stored
// messages (who, from where, the request). An admin operation that
// changes something is always written: it costs a Raft entry anyway, and
// a flood of reads must not hide it. Admin reads (listing applications,
// each chunk of a backup) and reads of stored messages or dead letters are
// each limited to auditAdminRate lines a second after a burst of as many
// (apart: any application may read messages, and its reads must not crowd
// out an admin's), and refusals to one a second, so that a client cannot
// fill the disk; a line says how many were held back before it.
type auditLog struct {
	log                   hclog.Logger
	admins, reads, denied *lograte.Limiter
}

const (
	auditAdminRate = 100
	// auditRequestBytes bounds the request an admin line quotes.
	auditRequestBytes = 512
)

func newAuditLog(log hclog.Logger) *auditLog {
	return &auditLog{log: log.Named("audit"),
		admins: lograte.NewBurst(time.Second/auditAdminRate, auditAdminRate),
		reads:  lograte.NewBurst(time.Second/auditAdminRate, auditAdminRate), denied: lograte.New(time.Second)}
}

// admin records an admin operation about to run. Its payload is the
// request's JSON (no admin request carries a secret).
func (l *auditLog) admin(who, remote string, t transport.Type, p []byte) {
	suppressed := 0
	if adminRead(t) {
		var ok bool
		if ok, suppressed = l.admins.Allow(); !ok {
			return
		}
	}
	if len(p) > auditRequestBytes {
		p = p[:auditRequestBytes]
	}
	l.log.Info("admin operation", "who", who, "remote", remote, "op", t.String(), "request", string(p), "suppressed", suppressed)
}

// read records a read of stored messages or dead letters (by any
// application, whose handler keeps to what it may consume), limited as admin reads
// are, apart from them. Its payload is the request's JSON.
func (l *auditLog) read(who, remote string, t transport.Type, p []byte) {
	ok, suppressed := l.reads.Allow()
	if !ok {
		return
	}
	if len(p) > auditRequestBytes {
		p = p[:auditRequestBytes]
	}
	l.log.Info("read", "who", who, "remote", remote, "op", t.String(), "request", string(p), "suppressed", suppressed)
}

// adminRead reports whether an admin request type only reads.
func adminRead(t transport.Type) bool {
	return t == transport.TypeApps || t == transport.TypeBackup
}

// refused records a refused request.
func (l *auditLog) refused(who, remote string, t transport.Type, why string) {
	if ok, suppressed := l.denied.Allow(); ok {
		l.log.Warn("request refused", "who", who, "remote", remote, "op", t.String(), "reason", why, "suppressed", suppressed)
	}
}
