package qmq

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync/atomic"
	"time"
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

func newMessageID(now time.Time) string {
	return now.UTC().Format("060102.150405.000") + "." + idPrefix + "." + strconv.FormatUint(idCounter.Add(1), 36)
}
