package test

import (
	"fmt"
	"strings"
	"sync"
)

// OrderEvents gathers what the order application's processes
// (test/internal/orderapp) report on their standard output: the orders
// they committed and rolled back, their resends and the sends answered as
// duplicates, and their consumers' deliveries. Safe for concurrent use.
type OrderEvents struct {
	mu         sync.Mutex
	Committed  map[string]bool // order ids whose commit returned
	RolledBack map[string]bool // order ids whose rollback returned
	Uncertain  map[string]bool // order ids whose commit failed
	Ready      map[string]int  // process name → lives that got ready
	Stopped    map[string]bool // producer name → stopped making orders
	Resends    int             // sends by a watchdog of a row sent before or written by another process
	Duplicates int             // sends answered as duplicates
	Applied    int             // deliveries whose effect was committed
	Absorbed   int             // deliveries after the effect: acknowledged, nothing applied
	Nacks      int             // deliveries whose handler failed
	Unknown    []string        // lines that are not events
}

// NewOrderEvents returns an empty record.
func NewOrderEvents() *OrderEvents {
	return &OrderEvents{Committed: map[string]bool{}, RolledBack: map[string]bool{}, Uncertain: map[string]bool{},
		Ready: map[string]int{}, Stopped: map[string]bool{}}
}

// Line records one line of a process's standard output.
func (e *OrderEvents) Line(line string) {
	f := strings.Fields(line)
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(f) < 2 {
		e.Unknown = append(e.Unknown, line)
		return
	}
	switch f[0] {
	case "ready":
		e.Ready[f[1]]++
	case "stopped":
		e.Stopped[f[1]] = true
	case "commit":
		e.Committed[f[1]] = true
	case "rollback":
		e.RolledBack[f[1]] = true
	case "uncertain":
		e.Uncertain[f[1]] = true
	case "resend":
		e.Resends++
	case "duplicate":
		e.Duplicates++
	case "applied":
		e.Applied++
	case "absorbed":
		e.Absorbed++
	case "nack":
		e.Nacks++
	default:
		e.Unknown = append(e.Unknown, line)
	}
}

// ReadyLives returns how many lives of the process name got ready.
func (e *OrderEvents) ReadyLives(name string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.Ready[name]
}

// HasStopped reports whether the producer name stopped making orders.
func (e *OrderEvents) HasStopped(name string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.Stopped[name]
}

// Count returns how many orders were committed and rolled back so far.
func (e *OrderEvents) Count() (committed, rolledBack int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.Committed), len(e.RolledBack)
}

// Summary describes the counts on one line.
func (e *OrderEvents) Summary() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return fmt.Sprintf("%d commits and %d rollbacks reported (%d uncertain); %d resends by a watchdog, %d sends answered as duplicates; "+
		"deliveries: %d applied, %d absorbed by the idempotent consumer, %d nacked",
		len(e.Committed), len(e.RolledBack), len(e.Uncertain), e.Resends, e.Duplicates, e.Applied, e.Absorbed, e.Nacks)
}
