package server

import "github.com/qmqgo/qmq/internal/auth"

// appTable is the applications the metaserver node checks requests
// against: its state machine's.
func (m *MetaNode) appTable() *auth.Table { return m.fsm.Apps() }
