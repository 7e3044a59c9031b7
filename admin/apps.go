package admin

import (
	"context"
	"fmt"
	"time"

	"github.com/qmqgo/qmq/internal/auth"
	"github.com/qmqgo/qmq/transport"
)

// Applications, for operators. An application is QMQ's app code: a name,
// a secret the metaserver makes (shown once, when it is made), and what
// the application may do. Rights are patterns of names:
//
//	"orders"    the subject (or consumer group) orders only
//	"orders.*"  every name starting with "orders.": orders.paid, orders.eu.new
//	"*"         every name
//
// An admin application may do everything, administration included.

// MaxAppGrace bounds RotateApp's grace.
const MaxAppGrace = transport.MaxAppGrace

// AppSpec is what CreateApp creates and UpdateApp sets: an application's
// rights and limits. For example, an application that sends orders and
// consumes payments as its own consumer groups:
//
//	admin.AppSpec{
//		Code:    "billing",
//		Send:    []string{"orders.*"},
//		Consume: []admin.ConsumeGrant{{Subject: "payments.*", ConsumerGroup: "billing-*"}},
//	}
type AppSpec struct {
	// Code names the application: 1 to 200 letters, digits, '.', '_',
	// '-' and ':', starting with a letter or digit.
	Code string
	// Admin lets the application do everything.
	Admin bool
	// Send are the subject patterns it may send to.
	Send []string
	// Consume are the consumer groups of subjects it may consume as.
	Consume []ConsumeGrant
	// MaxSubjects and MaxConsumerGroups bound the subjects (routes
	// created on first use) and the consumer groups it may create; 0 means
	// the defaults (1,000 each), and either may be at most 1,048,576.
	MaxSubjects       int
	MaxConsumerGroups int
	// MaxConsumers bounds its consumers registered at once in one broker
	// group (0: 1,024; at most 16,384, a broker group's own bound), and
	// MaxDelayed its delayed messages pending in one broker group (0:
	// 2,000,000; at most 1,073,741,824).
	MaxConsumers int
	MaxDelayed   int
}

// ConsumeGrant lets an application consume subjects matching Subject as
// consumer groups matching ConsumerGroup (both patterns). Send and
// Consume hold at most 32 rules together.
type ConsumeGrant struct {
	Subject       string `json:"subject"`
	ConsumerGroup string `json:"group"`
}

// AppInfo is an application as Apps lists it: never its secret, nor
// anything that verifies one.
type AppInfo struct {
	Code    string         `json:"code"`
	Admin   bool           `json:"admin,omitempty"`
	Send    []string       `json:"send,omitempty"`
	Consume []ConsumeGrant `json:"consume,omitempty"`
	// MaxSubjects, MaxConsumerGroups, MaxConsumers and MaxDelayed are its
	// limits, defaults applied.
	MaxSubjects       int `json:"max_subjects"`
	MaxConsumerGroups int `json:"max_groups"`
	MaxConsumers      int `json:"max_consumers"`
	MaxDelayed        int `json:"max_delayed"`
	// Subjects and ConsumerGroups are how many subjects and consumer
	// groups it created (an application deleted and created again starts
	// from nothing).
	Subjects       int `json:"subjects"`
	ConsumerGroups int `json:"groups"`
	// Secrets is 1, or 2 after a rotation with a grace: the old secret
	// then works until OldSecretExpires (which may be past).
	Secrets          int       `json:"secrets"`
	OldSecretExpires time.Time `json:"old_secret_expires,omitzero"`
}

// Apps returns every application, ordered by code.
func (a *Client) Apps(ctx context.Context) ([]AppInfo, error) {
	var infos []transport.AppInfo
	if err := a.call(ctx, transport.TypeApps, nil, &infos); err != nil {
		return nil, err
	}
	out := make([]AppInfo, 0, len(infos))
	for _, i := range infos {
		info := AppInfo{Code: i.Code, Admin: i.Admin, Send: i.Send, Consume: fromGrants(i.Consume),
			MaxSubjects: i.MaxSubjects, MaxConsumerGroups: i.MaxConsumerGroups, MaxConsumers: i.MaxConsumers, MaxDelayed: i.MaxDelayed,
			Subjects: i.Subjects, ConsumerGroups: i.ConsumerGroups, Secrets: i.Secrets}
		if i.OldSecretExpires != 0 {
			info.OldSecretExpires = time.UnixMilli(i.OldSecretExpires)
		}
		out = append(out, info)
	}
	return out, nil
}

// CreateApp creates an application and returns its secret: the only time
// the secret is shown. A code that exists is refused (INVALID). Should the
// call fail for want of an answer (a timeout), the application may exist
// all the same: RotateApp then gives it a secret to use.
func (a *Client) CreateApp(ctx context.Context, spec AppSpec) (secret string, err error) {
	var s transport.AppSecret
	if err := a.call(ctx, transport.TypeAppPut, spec.request(true), &s); err != nil {
		return "", err
	}
	return s.Secret, nil
}

// UpdateApp replaces an existing application's rights, admin flag and
// limits with spec's; its secrets stay. Lowering a limit below what the
// application created refuses it more, and removes nothing.
func (a *Client) UpdateApp(ctx context.Context, spec AppSpec) error {
	return a.call(ctx, transport.TypeAppPut, spec.request(false), nil)
}

// RotateApp gives an application a new secret and returns it. The secret
// it replaces keeps working for grace (0: it stops at once; at most
// MaxAppGrace, rounded up to a millisecond), so the application's
// instances can move to the new one; a secret replaced before that one
// stops at once.
func (a *Client) RotateApp(ctx context.Context, code string, grace time.Duration) (string, error) {
	if grace < 0 || grace > MaxAppGrace {
		return "", fmt.Errorf("qmq: rotate %s: grace %s outside 0..%s", code, grace, MaxAppGrace)
	}
	ms := int64((grace + time.Millisecond - 1) / time.Millisecond)
	var s transport.AppSecret
	if err := a.call(ctx, transport.TypeAppRotate, transport.AppRotateRequest{Code: code, GraceMillis: ms}, &s); err != nil {
		return "", err
	}
	return s.Secret, nil
}

// DeleteApp deletes an application: its secrets stop working at once.
// Deleting one that does not exist succeeds. The subjects and consumer
// groups it created stay.
func (a *Client) DeleteApp(ctx context.Context, code string) error {
	return a.call(ctx, transport.TypeAppDelete, transport.AppDeleteRequest{Code: code}, nil)
}

func (s AppSpec) request(create bool) transport.AppRequest {
	r := transport.AppRequest{Code: s.Code, Admin: s.Admin, Send: s.Send, MaxSubjects: s.MaxSubjects, MaxConsumerGroups: s.MaxConsumerGroups,
		MaxConsumers: s.MaxConsumers, MaxDelayed: s.MaxDelayed, Create: create}
	for _, g := range s.Consume {
		r.Consume = append(r.Consume, auth.Grant{Subject: g.Subject, Group: g.ConsumerGroup})
	}
	return r
}

func fromGrants(gs []auth.Grant) []ConsumeGrant {
	var out []ConsumeGrant
	for _, g := range gs {
		out = append(out, ConsumeGrant{Subject: g.Subject, ConsumerGroup: g.Group})
	}
	return out
}
