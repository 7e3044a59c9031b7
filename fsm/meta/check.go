package meta

import (
	"fmt"
	"net"

	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/internal/auth"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/version"
)

// maxAddrLen bounds an address.
const maxAddrLen = 255

func checkName(what, s string) error {
	if err := fsm.CheckName(what, s); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}

// CheckAddr reports whether s is a HOST:PORT address.
func CheckAddr(what, s string) error {
	if len(s) > maxAddrLen {
		return fmt.Errorf("%w: %s address of %d bytes", ErrInvalid, what, len(s))
	}
	if _, _, err := net.SplitHostPort(s); err != nil {
		return fmt.Errorf("%w: %s address %q: %v", ErrInvalid, what, s, err)
	}
	return nil
}

// GroupName is the metaserver group's own name, which no broker group
// may take.
const GroupName = limits.MetaGroup

// CheckBrokerGroup reports whether s may name a broker group.
func CheckBrokerGroup(s string) error {
	if err := checkName("broker group", s); err != nil {
		return err
	}
	if s == GroupName {
		return fmt.Errorf("%w: group name %q is the metaserver's", ErrInvalid, s)
	}
	return nil
}

func (c *Register) check() error {
	if err := CheckBrokerGroup(c.BrokerGroup); err != nil {
		return err
	}
	if err := checkName("node id", c.ID); err != nil {
		return err
	}
	if err := CheckAddr("raft", c.RaftAddr); err != nil {
		return err
	}
	if err := CheckAddr("client", c.ClientAddr); err != nil {
		return err
	}
	if c.HTTPAddr != "" {
		return CheckAddr("http", c.HTTPAddr)
	}
	return nil
}

func (c *Deregister) check() error {
	if err := checkName("broker group", c.BrokerGroup); err != nil {
		return err
	}
	return checkName("node id", c.ID)
}

// checkAuth makes an auth refusal a meta one.
func checkAuth(err error) error {
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}

// checkAppName reports whether app is "" (no application) or a valid code.
func checkAppName(app string) error {
	if app == "" {
		return nil
	}
	return checkAuth(auth.CheckCode(app))
}

func (c *Assign) check() error {
	if err := checkName("subject", c.Subject); err != nil {
		return err
	}
	if err := checkAppName(c.App); err != nil {
		return err
	}
	if len(c.BrokerGroups) == 0 {
		return fmt.Errorf("%w: no groups for subject %s", ErrInvalid, c.Subject)
	}
	if len(c.BrokerGroups) > MaxBrokerGroupsPerSubject {
		return overLimit("MaxBrokerGroupsPerSubject", MaxBrokerGroupsPerSubject, "%d groups for subject %s", len(c.BrokerGroups), c.Subject)
	}
	for _, g := range c.BrokerGroups {
		if err := checkName("broker group", g); err != nil {
			return err
		}
	}
	return nil
}

func (c *SetWritable) check() error { return checkName("broker group", c.BrokerGroup) }

func (c *Consumer) check() error {
	if err := checkName("subject", c.Subject); err != nil {
		return err
	}
	if err := checkAppName(c.App); err != nil {
		return err
	}
	if err := checkBroker(c.Broker); err != nil {
		return err
	}
	return checkName("consumer group", c.ConsumerGroup)
}

func (c *ForgetConsumer) check() error {
	if err := checkName("subject", c.Subject); err != nil {
		return err
	}
	if err := checkBroker(c.Broker); err != nil {
		return err
	}
	return checkName("consumer group", c.ConsumerGroup)
}

// checkBroker checks the broker group a consumer group's record names,
// "" for none.
func checkBroker(g string) error {
	if g == "" {
		return nil
	}
	return checkName("broker group", g)
}

func (c *Member) check() error {
	if err := checkName("node id", c.ID); err != nil {
		return err
	}
	if c.ClientAddr != "" {
		return CheckAddr("client", c.ClientAddr)
	}
	return nil
}

// rightsOnly is a well-formed secret record with which Check checks an
// update's rights (App.Check wants a secret); it is never stored.
var rightsOnly = func() auth.Secret {
	_, s, err := auth.NewSecret()
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return s
}()

func (c *PutApp) check() error {
	if c.Create {
		if len(c.App.Secrets) != 1 {
			return fmt.Errorf("%w: new application %s has %d secrets, not 1", ErrInvalid, c.App.Code, len(c.App.Secrets))
		}
		return checkAuth(c.App.Check())
	}
	if len(c.App.Secrets) != 0 {
		return fmt.Errorf("%w: an update of application %s carries secrets: it keeps the stored ones", ErrInvalid, c.App.Code)
	}
	a := c.App
	a.Secrets = []auth.Secret{rightsOnly}
	return checkAuth(a.Check())
}

func (c *RotateApp) check() error {
	// The new secret is checked as a record's current one: well formed,
	// never expiring.
	a := auth.App{Code: c.Code, Secrets: []auth.Secret{c.Secret}}
	if err := a.Check(); err != nil {
		return checkAuth(err)
	}
	if c.OldExpires < 0 {
		return fmt.Errorf("%w: application %s: the old secret's expiry %d is negative", ErrInvalid, c.Code, c.OldExpires)
	}
	return nil
}

func (c *DeleteApp) check() error { return checkAuth(auth.CheckCode(c.Code)) }

func (c *SetVersion) check() error {
	if c.Version < version.V1 {
		return fmt.Errorf("%w: version %d: versions start at 1", ErrInvalid, c.Version)
	}
	return nil
}
