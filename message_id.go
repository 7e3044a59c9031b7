package qmq

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/qmqgo/qmq/internal/limits"
)

// Message ids are unique without coordination: the generation time, a
// random process prefix drawn once, and a counter. They sort roughly by
// time, which keeps them readable in logs.
var (
	idPrefix  = randomHex(6)
	idCounter atomic.Uint64
)

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// checkID reports whether id may be a message's id. The broker accepts
// any bytes within MaxIDLen; the SDK also holds chosen ids to
// printable ASCII without spaces, as the ids it makes are, so that an id
// reads the same in a log, a terminal and JSON.
func checkID(id string) error {
	if id == "" || len(id) > MaxIDLen {
		return fmt.Errorf("%w: %d bytes (1..%d)", ErrInvalidID, len(id), MaxIDLen)
	}
	if i := limits.FirstUnprintable(id); i >= 0 {
		return fmt.Errorf("%w: %.40q: byte %d (%q) is not printable ASCII other than a space", ErrInvalidID, id, i, id[i])
	}
	return nil
}

func newMessageID(now time.Time) string {
	return now.UTC().Format("060102.150405.000") + "." + idPrefix + "." + strconv.FormatUint(idCounter.Add(1), 36)
}
