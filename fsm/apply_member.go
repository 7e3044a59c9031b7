package fsm

import (
	"fmt"

	"github.com/qmqgo/qmq/internal/limits"
)

// applySetMember records (or, with an empty address, forgets) a member's
// client address.
func (f *FSM) applySetMember(c *SetMember) any {
	if err := CheckName("node id", c.ID); err != nil {
		return err
	}
	if len(c.ClientAddr) > limits.MaxAddr {
		return fmt.Errorf("%w: client address of %d bytes", ErrInvalid, len(c.ClientAddr))
	}
	f.st.stamp(c.Now)
	if c.ClientAddr == "" {
		delete(f.st.members, c.ID)
	} else {
		f.st.members[c.ID] = c.ClientAddr
	}
	return nil
}
