package qmq

import "time"

// SetRouteTTL sets how long p keeps a route before asking again: tests
// make every route stale at once.
func SetRouteTTL(p *Producer, d time.Duration) { p.r.ttl = d }
