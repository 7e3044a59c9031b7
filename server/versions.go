package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/qmqgo/qmq/internal/version"
	"github.com/qmqgo/qmq/transport"
)

// memberRanges asks every other server of the group's configuration,
// voter or not (each applies the group's entries), for the version
// Numbers its build supports, by a status request to its recorded client
// address, all at once within clockReadTimeout. A node that advertises no
// range (one of a release before version gates) supports V1 alone. The
// error names each member that could not be asked: a raise of the group's
// active Number must not go past a member nobody heard from.
func (g *raftGroup) memberRanges(ctx context.Context) (map[string]version.Range, error) {
	f := g.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("server: reading the group's configuration: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, clockReadTimeout)
	defer cancel()
	out := map[string]version.Range{g.id: version.Build()}
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, s := range f.Configuration().Servers {
		id := string(s.ID)
		if id == g.id {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := g.askRange(ctx, id)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			out[id] = r
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return out, fmt.Errorf("server: %w", errors.Join(errs...))
	}
	return out, nil
}

// askRange asks member id for its status and returns the range it says its
// build supports.
func (g *raftGroup) askRange(ctx context.Context, id string) (version.Range, error) {
	addr := g.memberAddr(id)
	if addr == "" {
		return version.Range{}, fmt.Errorf("member %s: its client address is not recorded yet", id)
	}
	conn, err := g.dial.Dial(ctx, addr)
	if err != nil {
		return version.Range{}, fmt.Errorf("member %s: %w", id, err)
	}
	defer conn.Close()
	body, err := conn.Call(ctx, transport.TypeStatus, nil)
	if err != nil {
		return version.Range{}, fmt.Errorf("member %s: %w", id, err)
	}
	var st transport.Status
	if err := json.Unmarshal(body, &st); err != nil {
		return version.Range{}, fmt.Errorf("member %s: its status: %w", id, err)
	}
	if st.ID != id {
		return version.Range{}, fmt.Errorf("member %s: %s answers as node %q", id, addr, st.ID)
	}
	if st.Versions == nil {
		return version.Range{}.OrV1(), nil
	}
	return *st.Versions, nil
}
