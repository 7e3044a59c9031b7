// Package delaywheel holds what delayed delivery needs besides Raft: the
// in-memory hashed timing wheel a broker group's leader fires due messages
// from, and the schedule log, one log per hour of delivery time, that keeps
// delayed messages on disk until they are due.
//
// Neither reads a clock. The wheel is told what time it is on every call,
// and the schedule log is told each entry's delivery time, so the state
// machine that drives them stays deterministic and the tests need no
// sleeping. DESIGN.md in this directory explains the choices.
package delaywheel
