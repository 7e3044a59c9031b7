package console

import (
	"net/http"
	"time"

	"github.com/qmqgo/qmq/internal/lograte"
)

// Actions through the API reach the cluster from the console's own
// connections, so a node's audit log names the application but not where
// the person asking sits. The console writes that line itself, in the
// node's audit format (under the name "audit"): who, the HTTP caller's
// address (r.RemoteAddr: the console's listener, or the proxy in front
// of it), the action's path and its outcome. It is written before the
// answer, so that no caller sees the result of an action left out of the
// log. Failed actions are limited to one line a second, as the nodes'
// refusals are, so that bad requests cannot fill the disk; one that
// succeeded is always written (it changed the cluster, at the cost of a
// Raft entry anyway).

// auditLog writes the API's action lines.
type auditLog struct {
	failed *lograte.Limiter
}

func newAuditLog() *auditLog { return &auditLog{failed: lograte.New(time.Second)} }

// action records the POST r by c and its outcome: err nil, or the error
// answered.
func (h *handler) action(r *http.Request, c caller, err error) {
	who := "app:" + c.code
	if c.code == "" {
		who = "none" // authentication off
	}
	log := h.log.Named("audit")
	if err == nil {
		log.Info("http action", "who", who, "remote", r.RemoteAddr, "path", r.URL.Path, "outcome", "ok")
		return
	}
	if ok, suppressed := h.audit.failed.Allow(); ok {
		_, code := statusOf(err)
		log.Warn("http action", "who", who, "remote", r.RemoteAddr, "path", r.URL.Path, "outcome", code, "error", err.Error(), "suppressed", suppressed)
	}
}
