package metaserver

import (
	"context"
	"encoding/json"
	"time"

	"github.com/qmqgo/qmq/fsm/meta"
	"github.com/qmqgo/qmq/internal/auth"
	"github.com/qmqgo/qmq/transport"
)

// The metaserver leader's side of the application registry. A secret is
// made here, on the leader, and answered once to whoever asked: the
// command proposed carries only its salt and hash, so no Raft log,
// snapshot or follower holds it.

// handleApps lists the applications, without their secrets' records.
func (m *Server) handleApps() ([]byte, error) {
	out := []transport.AppInfo{}
	for _, a := range m.fsm.Apps().Apps() {
		u := m.fsm.Usage(a.Code)
		info := transport.AppInfo{Code: a.Code, Admin: a.Admin, Send: a.Send, Consume: a.Consume,
			MaxSubjects: a.SubjectLimit(), MaxConsumerGroups: a.GroupLimit(), MaxConsumers: a.ConsumerLimit(), MaxDelayed: a.DelayedLimit(),
			Subjects: u.Subjects, ConsumerGroups: u.Groups, Secrets: len(a.Secrets)}
		if len(a.Secrets) > 1 {
			info.OldSecretExpires = a.Secrets[1].Expires
		}
		out = append(out, info)
	}
	return json.Marshal(out)
}

// handleAppPut creates an application, answering its secret, or replaces
// an existing one's rights.
func (m *Server) handleAppPut(ctx context.Context, p []byte) ([]byte, error) {
	var req transport.AppRequest
	if err := transport.DecodeJSON(p, &req); err != nil {
		return nil, err
	}
	a := auth.App{Code: req.Code, Admin: req.Admin, Send: req.Send, Consume: req.Consume,
		MaxSubjects: req.MaxSubjects, MaxGroups: req.MaxConsumerGroups, MaxConsumers: req.MaxConsumers, MaxDelayed: req.MaxDelayed}
	if !req.Create {
		if err := m.proposeChecked(ctx, &meta.PutApp{App: a}); err != nil {
			return nil, err
		}
		m.log.Info("application changed", "app", a.Code, "admin", a.Admin, "rules", len(a.Send)+len(a.Consume))
		return nil, nil
	}
	secret, s, err := auth.NewSecret()
	if err != nil {
		return nil, transport.Errorf(transport.Internal, "%v", err)
	}
	a.Secrets = []auth.Secret{s}
	if err := m.proposeChecked(ctx, &meta.PutApp{App: a, Create: true}); err != nil {
		return nil, err
	}
	m.log.Info("application created", "app", a.Code, "admin", a.Admin, "rules", len(a.Send)+len(a.Consume))
	return json.Marshal(transport.AppSecret{Code: a.Code, Secret: secret})
}

// handleAppRotate gives an application a new secret, answering it; the
// one it replaces works for the request's grace.
func (m *Server) handleAppRotate(ctx context.Context, p []byte) ([]byte, error) {
	var req transport.AppRotateRequest
	if err := transport.DecodeJSON(p, &req); err != nil {
		return nil, err
	}
	if req.GraceMillis < 0 || req.GraceMillis > transport.MaxAppGrace.Milliseconds() {
		return nil, transport.Errorf(transport.Invalid, "grace %d ms outside 0..%d (%s)", req.GraceMillis,
			transport.MaxAppGrace.Milliseconds(), transport.MaxAppGrace)
	}
	secret, s, err := auth.NewSecret()
	if err != nil {
		return nil, transport.Errorf(transport.Internal, "%v", err)
	}
	cmd := &meta.RotateApp{Code: req.Code, Secret: s}
	if req.GraceMillis > 0 {
		cmd.OldExpires = m.cfg.Now().Add(time.Duration(req.GraceMillis) * time.Millisecond).UnixMilli()
	}
	if err := m.proposeChecked(ctx, cmd); err != nil {
		return nil, err
	}
	m.log.Info("application secret rotated", "app", req.Code, "grace", time.Duration(req.GraceMillis)*time.Millisecond)
	return json.Marshal(transport.AppSecret{Code: req.Code, Secret: secret})
}

// handleAppDelete forgets an application. An unknown one is no error and
// costs no Raft entry: the leader has caught up, so it is gone already.
func (m *Server) handleAppDelete(ctx context.Context, p []byte) ([]byte, error) {
	var req transport.AppDeleteRequest
	if err := transport.DecodeJSON(p, &req); err != nil {
		return nil, err
	}
	cmd := &meta.DeleteApp{Code: req.Code, Release: true}
	if err := meta.Check(cmd); err != nil {
		return nil, transport.Errorf(transport.Invalid, "%v", err)
	}
	if m.fsm.Apps().App(req.Code) == nil {
		return nil, nil
	}
	if err := m.proposeChecked(ctx, cmd); err != nil {
		return nil, err
	}
	m.log.Info("application deleted", "app", req.Code)
	return nil, nil
}
