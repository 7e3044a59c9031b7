package fsm

import (
	"fmt"
	"math"

	"github.com/qmqgo/qmq/internal/binenc"
)

// SetBrokerConfig changes the broker group's configuration: the fields
// named by Set take Config's values, the others stay. The result must pass
// BrokerConfig.Check, or the command is refused and changes nothing. With
// Seed, it applies only to a group whose configuration no command has set
// yet (a leader proposing its own values for a new or upgraded group), and
// is passed over otherwise, so that a seed racing an operator's change,
// or another leader's seed, never overwrites it. Payload:
//
//	set u8 (config bits) | flags u8 (1 seed) | retention-age uvarint | retention-bytes uvarint |
//	dedup-window uvarint | max-pull uvarint | max-unacked uvarint | segment-size uvarint |
//	index-segment-size uvarint
type SetBrokerConfig struct {
	Now    int64
	Set    ConfigBits
	Seed   bool
	Config BrokerConfig
}

// ConfigBits names fields of BrokerConfig.
type ConfigBits uint8

// Config bits.
const (
	SetRetentionAge ConfigBits = 1 << iota
	SetRetentionBytes
	SetDedupWindow
	SetMaxPull
	SetMaxUnacked
	SetSegmentSize
	SetIndexSegmentSize
	// SetAllConfig names every field.
	SetAllConfig = SetRetentionAge | SetRetentionBytes | SetDedupWindow | SetMaxPull | SetMaxUnacked | SetSegmentSize | SetIndexSegmentSize
)

// SetBrokerConfig flags.
const configSeed = 1

// Encode returns the command's bytes.
func (c *SetBrokerConfig) Encode() []byte {
	b := append(appendHeader(nil, CmdBrokerConfig, c.Now), byte(c.Set))
	flags := byte(0)
	if c.Seed {
		flags |= configSeed
	}
	b = append(b, flags)
	for _, v := range c.Config.values() {
		b = binenc.AppendUvarint(b, uint64(v))
	}
	return b
}

// values lists c's fields in the order of the payload and of ConfigBits.
func (c BrokerConfig) values() []int64 {
	return []int64{c.RetentionAge, c.RetentionBytes, c.DedupWindow, int64(c.MaxPull), int64(c.MaxUnacked), c.SegmentSize, c.IndexSegmentSize}
}

// fields points at c's fields in the order of values.
func (c *BrokerConfig) fields() []func(int64) {
	return []func(int64){
		func(v int64) { c.RetentionAge = v },
		func(v int64) { c.RetentionBytes = v },
		func(v int64) { c.DedupWindow = v },
		func(v int64) { c.MaxPull = int(v) },
		func(v int64) { c.MaxUnacked = int(v) },
		func(v int64) { c.SegmentSize = v },
		func(v int64) { c.IndexSegmentSize = v },
	}
}

// decodeSetBrokerConfig reads a SetBrokerConfig's payload, refusing a
// flag it does not know and a value past what an int64 holds (the encoder
// writes neither, so a command has one encoding).
func decodeSetBrokerConfig(now int64, r *binenc.Reader) (*SetBrokerConfig, error) {
	c := &SetBrokerConfig{Now: now, Set: ConfigBits(r.Byte())}
	flags := r.Byte()
	if flags&^configSeed != 0 {
		return nil, fmt.Errorf("%w: %s: unknown flags %#x", ErrBadCommand, CmdBrokerConfig, flags)
	}
	c.Seed = flags&configSeed != 0
	for i, set := range c.Config.fields() {
		v := r.Uvarint()
		if v > math.MaxInt64 {
			return nil, fmt.Errorf("%w: %s: %s %d is past what it can hold", ErrBadCommand, CmdBrokerConfig, configNames[i], v)
		}
		set(int64(v))
	}
	return c, nil
}

// With returns cur with the fields c sets taken from c.Config: what
// applying c to a group configured with cur makes of it, if it passes
// Check.
func (c *SetBrokerConfig) With(cur BrokerConfig) BrokerConfig {
	values := c.Config.values()
	for i, set := range cur.fields() {
		if c.Set&(1<<i) != 0 {
			set(values[i])
		}
	}
	return cur
}
