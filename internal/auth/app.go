package auth

import (
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/qmqgo/qmq/internal/limits"
)

// Errors. ErrInvalid: a record or request names something badly or
// exceeds a limit. ErrUnauthenticated: unknown application, wrong or
// expired secret.
var (
	ErrInvalid         = errors.New("auth: invalid")
	ErrUnauthenticated = errors.New("auth: unauthenticated")
)

// Limits. The largest table (MaxApps applications, each with MaxRules
// rules of the longest patterns) encodes to under 9 MiB of JSON, so it
// fits one frame (limits.MaxFrame) on its way to the brokers; the
// metaserver's tests check the arithmetic.
const (
	// MaxApps bounds the applications of a cluster.
	MaxApps = 512
	// MaxRules bounds an application's send and consume rules together.
	MaxRules = 32
	// MaxSecrets is how many secrets an application holds: the current
	// one and, after a rotation, the one before it until it expires.
	MaxSecrets = 2
	// MaxSecretLen bounds a secret as a client presents it; a secret
	// NewSecret makes is SecretLen bytes.
	MaxSecretLen = limits.MaxSecret
	// DefaultMaxSubjects and DefaultMaxGroups are how many subjects and
	// consumer groups an application may create unless it says otherwise;
	// MaxPerApp bounds either setting.
	DefaultMaxSubjects = 1000
	DefaultMaxGroups   = 1000
	MaxPerApp          = 1 << 20
	// DefaultMaxConsumers is how many consumers an application may have
	// registered at once in one broker group unless it says otherwise, a
	// group's most (limits.MaxConsumersPerGroup); the setting is at most
	// the broker group's own bound, limits.MaxConsumers.
	DefaultMaxConsumers = limits.MaxConsumersPerGroup
	// DefaultMaxDelayed is how many delayed messages an application may
	// have pending in one broker group unless it says otherwise, a tenth
	// of what one hour of a broker group holds (limits.MaxDelayedPerHour);
	// the setting is at most limits.MaxDelayed.
	DefaultMaxDelayed = limits.MaxDelayedPerHour / 10
)

// App is an application as the metaserver stores it (JSON in its
// snapshot and in the table it sends to brokers). It never holds a
// secret, only each secret's salt and hash.
type App struct {
	Code  string `json:"code"`
	Admin bool   `json:"admin,omitempty"`
	// Secrets are the current secret first, then, after a rotation, the
	// one before it with its expiry.
	Secrets []Secret `json:"secrets"`
	// Send are the subject patterns the application may send to.
	Send []string `json:"send,omitempty"`
	// Consume are the consumer groups (of subjects) the application may
	// consume as.
	Consume []Grant `json:"consume,omitempty"`
	// MaxSubjects and MaxGroups bound the subjects and consumer groups
	// the application may create; 0 means the defaults.
	MaxSubjects int `json:"max_subjects,omitempty"`
	MaxGroups   int `json:"max_groups,omitempty"`
	// MaxConsumers bounds the consumers the application may have
	// registered at once in one broker group, and MaxDelayed its delayed
	// messages pending in one broker group; 0 means the defaults.
	MaxConsumers int `json:"max_consumers,omitempty"`
	MaxDelayed   int `json:"max_delayed,omitempty"`
}

// Grant lets an application consume subjects matching Subject as consumer
// groups matching Group (both patterns).
type Grant struct {
	Subject string `json:"subject"`
	Group   string `json:"group"`
}

// Secret is one secret's salt and SHA-256 hash (hex), and when it stops
// being accepted (Unix milliseconds; 0: never).
type Secret struct {
	Salt    string `json:"salt"`
	Hash    string `json:"hash"`
	Expires int64  `json:"expires,omitempty"`
}

// Check reports whether a is a valid record: its code a valid name, one or
// two well-formed secrets, valid patterns, and every count within limits.
func (a *App) Check() error {
	if err := CheckCode(a.Code); err != nil {
		return err
	}
	if len(a.Secrets) < 1 || len(a.Secrets) > MaxSecrets {
		return fmt.Errorf("%w: application %s has %d secrets (1..%d)", ErrInvalid, a.Code, len(a.Secrets), MaxSecrets)
	}
	for _, s := range a.Secrets {
		if err := s.check(); err != nil {
			return fmt.Errorf("application %s: %w", a.Code, err)
		}
	}
	if a.Secrets[0].Expires != 0 {
		return fmt.Errorf("%w: application %s: its current secret expires", ErrInvalid, a.Code)
	}
	return a.checkRights()
}

// checkRights checks a's rules and limits.
func (a *App) checkRights() error {
	if n := len(a.Send) + len(a.Consume); n > MaxRules {
		return fmt.Errorf("%w: application %s has %d rules (at most %d)", ErrInvalid, a.Code, n, MaxRules)
	}
	for _, p := range a.Send {
		if err := CheckPattern("subject", p); err != nil {
			return err
		}
	}
	for _, g := range a.Consume {
		if err := CheckPattern("subject", g.Subject); err != nil {
			return err
		}
		if err := CheckPattern("group", g.Group); err != nil {
			return err
		}
	}
	if a.MaxSubjects < 0 || a.MaxSubjects > MaxPerApp || a.MaxGroups < 0 || a.MaxGroups > MaxPerApp {
		return fmt.Errorf("%w: application %s: max subjects %d, max groups %d (0..%d)", ErrInvalid, a.Code, a.MaxSubjects, a.MaxGroups, MaxPerApp)
	}
	if a.MaxConsumers < 0 || a.MaxConsumers > limits.MaxConsumers {
		return fmt.Errorf("%w: application %s: max consumers %d (0..%d)", ErrInvalid, a.Code, a.MaxConsumers, limits.MaxConsumers)
	}
	if a.MaxDelayed < 0 || a.MaxDelayed > limits.MaxDelayed {
		return fmt.Errorf("%w: application %s: max delayed %d (0..%d)", ErrInvalid, a.Code, a.MaxDelayed, limits.MaxDelayed)
	}
	return nil
}

// CheckCode reports whether code is a valid application code (the naming
// rule of subjects).
func CheckCode(code string) error {
	if err := limits.CheckName("application", code); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}

// SubjectLimit and GroupLimit are a's limits with defaults applied.
func (a *App) SubjectLimit() int { return orDefault(a.MaxSubjects, DefaultMaxSubjects) }

// GroupLimit: see SubjectLimit.
func (a *App) GroupLimit() int { return orDefault(a.MaxGroups, DefaultMaxGroups) }

// ConsumerLimit: see SubjectLimit.
func (a *App) ConsumerLimit() int { return orDefault(a.MaxConsumers, DefaultMaxConsumers) }

// DelayedLimit: see SubjectLimit.
func (a *App) DelayedLimit() int { return orDefault(a.MaxDelayed, DefaultMaxDelayed) }

func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

func (s Secret) check() error {
	salt, err1 := hex.DecodeString(s.Salt)
	hash, err2 := hex.DecodeString(s.Hash)
	if err1 != nil || err2 != nil || len(salt) != saltLen || len(hash) != hashLen {
		return fmt.Errorf("%w: a secret's salt and hash must be %d and %d hex bytes", ErrInvalid, saltLen, hashLen)
	}
	if s.Expires < 0 {
		return fmt.Errorf("%w: a secret's expiry is negative", ErrInvalid)
	}
	return nil
}
