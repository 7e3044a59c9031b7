package auth

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Table is every application of a cluster, as nodes check requests
// against it. It is immutable: a change makes a new Table.
type Table struct {
	apps    map[string]*Rights
	records []App // sorted by code
	version string
}

// Rights is what one application may do.
type Rights struct {
	app     *App
	send    matcher
	consume []grant
	// use matches every subject the application may send to or consume.
	use matcher
}

type grant struct {
	subjects, groups matcher
}

// Identity is an application that proved its secret: its code and the
// hash of the secret it proved, so that a rotation or a deletion ends
// what it may do.
type Identity struct {
	App  string
	hash string
}

// NewTable builds a table from records, checking each.
func NewTable(apps []App) (*Table, error) {
	if len(apps) > MaxApps {
		return nil, fmt.Errorf("%w: %d applications (at most %d)", ErrInvalid, len(apps), MaxApps)
	}
	t := &Table{apps: make(map[string]*Rights, len(apps)), records: slices.Clone(apps)}
	slices.SortFunc(t.records, func(a, b App) int { return strings.Compare(a.Code, b.Code) })
	for i := range t.records {
		a := &t.records[i]
		if err := a.Check(); err != nil {
			return nil, err
		}
		if t.apps[a.Code] != nil {
			return nil, fmt.Errorf("%w: application %s twice", ErrInvalid, a.Code)
		}
		t.apps[a.Code] = compile(a)
	}
	b, err := json.Marshal(t.records)
	if err != nil {
		return nil, fmt.Errorf("auth: encode table: %w", err)
	}
	sum := sha256.Sum256(b)
	t.version = hex.EncodeToString(sum[:])
	return t, nil
}

func compile(a *App) *Rights {
	r := &Rights{app: a}
	for _, p := range a.Send {
		r.send.add(p)
		r.use.add(p)
	}
	for _, g := range a.Consume {
		var c grant
		c.subjects.add(g.Subject)
		c.groups.add(g.Group)
		r.consume = append(r.consume, c)
		r.use.add(g.Subject)
	}
	return r
}

// Version names the table's content: equal tables have equal versions.
// The empty table's version is "" on a nil *Table.
func (t *Table) Version() string {
	if t == nil {
		return ""
	}
	return t.version
}

// Apps returns the records, sorted by code; the caller must not change them.
func (t *Table) Apps() []App {
	if t == nil {
		return nil
	}
	return t.records
}

// Len is how many applications the table holds.
func (t *Table) Len() int {
	if t == nil {
		return 0
	}
	return len(t.records)
}

// App returns the record of code, or nil.
func (t *Table) App(code string) *App {
	if t == nil || t.apps[code] == nil {
		return nil
	}
	return t.apps[code].app
}

// Authenticate checks an application's code and secret at now. Every
// refusal wraps ErrUnauthenticated and reads alike, and an unknown code
// costs a hash like a known one, so that neither the answer nor its time
// tells which codes exist.
func (t *Table) Authenticate(code, secret string, now time.Time) (Identity, error) {
	if len(secret) > MaxSecretLen {
		return Identity{}, fmt.Errorf("%w: a secret of %d bytes (at most %d)", ErrUnauthenticated, len(secret), MaxSecretLen)
	}
	var r *Rights
	if t != nil {
		r = t.apps[code]
	}
	if r == nil {
		unknown.Matches(secret, now)
		return Identity{}, refused(code)
	}
	for _, s := range r.app.Secrets {
		if s.Matches(secret, now) {
			return Identity{App: code, hash: s.Hash}, nil
		}
	}
	return Identity{}, refused(code)
}

// unknown is what an unknown code's secret is hashed against.
var unknown = Secret{Salt: strings.Repeat("00", saltLen), Hash: strings.Repeat("00", hashLen)}

func refused(code string) error {
	return fmt.Errorf("%w: application %q is unknown, or its secret wrong or expired", ErrUnauthenticated, code)
}

// Rights returns what id may do at now, or an error wrapping
// ErrUnauthenticated when its application is gone or the secret it proved
// has been rotated out or has expired since.
func (t *Table) Rights(id Identity, now time.Time) (*Rights, error) {
	var r *Rights
	if t != nil {
		r = t.apps[id.App]
	}
	if r == nil {
		return nil, fmt.Errorf("%w: application %s no longer exists", ErrUnauthenticated, id.App)
	}
	for _, s := range r.app.Secrets {
		if s.Hash == id.hash {
			if s.Expires != 0 && now.UnixMilli() >= s.Expires {
				break
			}
			return r, nil
		}
	}
	return nil, fmt.Errorf("%w: application %s's secret was rotated or has expired: connect again with the current one", ErrUnauthenticated, id.App)
}

// App is the application's record.
func (r *Rights) App() *App { return r.app }

// Admin reports whether the application may run admin operations.
func (r *Rights) Admin() bool { return r.app.Admin }

// MaySend reports whether the application may send to subject.
func (r *Rights) MaySend(subject string) bool { return r.app.Admin || r.send.match(subject) }

// MayConsume reports whether the application may consume subject as
// consumer group group.
func (r *Rights) MayConsume(subject, group string) bool {
	if r.app.Admin {
		return true
	}
	for i := range r.consume {
		if r.consume[i].subjects.match(subject) && r.consume[i].groups.match(group) {
			return true
		}
	}
	return false
}

// MayRead reports whether the application may consume subject as some
// group: then it may read the subject's stored messages (they are what it
// may consume) and their timelines.
func (r *Rights) MayRead(subject string) bool {
	if r.app.Admin {
		return true
	}
	for i := range r.consume {
		if r.consume[i].subjects.match(subject) {
			return true
		}
	}
	return false
}

// MayUse reports whether the application may send to subject or consume
// it as some group: enough to look up its route.
func (r *Rights) MayUse(subject string) bool { return r.app.Admin || r.use.match(subject) }
