package transport

import (
	"time"

	"github.com/qmqgo/qmq/internal/auth"
)

// The application registry's requests (TypeApps, TypeAppPut,
// TypeAppRotate, TypeAppDelete) go to the metaserver, like the other
// metaserver requests, and their payloads are JSON. A secret travels only
// in an AppSecret, the answer to the request that made it; no other
// request or answer carries a secret, a salt or a hash.

// MaxAppGrace bounds AppRotateRequest.GraceMillis: how long a replaced
// secret may keep working.
const MaxAppGrace = 30 * 24 * time.Hour

// AppRequest creates an application (Create) or replaces an existing one's
// rights, admin flag and limits (its secrets stay). Send are subject
// patterns, Consume consumer groups (patterns) of subjects (patterns): a
// name ("orders"), a prefix followed by '*' ("orders.*"), or "*" alone.
// MaxSubjects and MaxGroups bound the subjects and consumer groups the
// application may create, MaxConsumers its consumers registered at once
// and MaxDelayed its delayed messages pending in one broker group; 0 means
// the defaults.
type AppRequest struct {
	Code              string       `json:"code"`
	Admin             bool         `json:"admin,omitempty"`
	Send              []string     `json:"send,omitempty"`
	Consume           []auth.Grant `json:"consume,omitempty"`
	MaxSubjects       int          `json:"max_subjects,omitempty"`
	MaxConsumerGroups int          `json:"max_groups,omitempty"`
	MaxConsumers      int          `json:"max_consumers,omitempty"`
	MaxDelayed        int          `json:"max_delayed,omitempty"`
	Create            bool         `json:"create,omitempty"`
}

// AppSecret answers a creation or a rotation with the application's new
// secret: the only time it is shown (the metaserver keeps its hash).
type AppSecret struct {
	Code   string `json:"code"`
	Secret string `json:"secret"`
}

// AppRotateRequest gives an application a new secret. The one it replaces
// keeps working for GraceMillis milliseconds (0: it stops at once; at most
// MaxAppGrace); one replaced before it stops at once.
type AppRotateRequest struct {
	Code        string `json:"code"`
	GraceMillis int64  `json:"grace_ms,omitempty"`
}

// AppDeleteRequest forgets an application; its secrets stop working at
// once. Deleting an unknown application succeeds.
type AppDeleteRequest struct {
	Code string `json:"code"`
}

// AppInfo is one application as TypeApps lists it: its rights, its limits
// (defaults applied) and what it created under them, and how many secrets
// it holds; never a secret, a salt or a hash.
type AppInfo struct {
	Code              string       `json:"code"`
	Admin             bool         `json:"admin,omitempty"`
	Send              []string     `json:"send,omitempty"`
	Consume           []auth.Grant `json:"consume,omitempty"`
	MaxSubjects       int          `json:"max_subjects"`
	MaxConsumerGroups int          `json:"max_groups"`
	// MaxConsumers and MaxDelayed are its limits in each broker group.
	MaxConsumers int `json:"max_consumers"`
	MaxDelayed   int `json:"max_delayed"`
	// Subjects and Groups are the routes and consumer groups recorded as
	// created by the application.
	Subjects       int `json:"subjects"`
	ConsumerGroups int `json:"groups"`
	// Secrets is 1, or 2 after a rotation with a grace: then
	// OldSecretExpires is when the old one stops working (Unix
	// milliseconds), which may be past.
	Secrets          int   `json:"secrets"`
	OldSecretExpires int64 `json:"old_secret_expires,omitempty"`
}
