// Package meta is the metaserver's replicated state machine: the broker
// groups and their registered nodes, each group's writable flag, the
// subject → broker-group routes and the consumer groups known per subject,
// and the applications (QMQ's app codes: their rights and their secrets'
// hashes) with what each created.
//
// The state is small (it grows with groups and subjects, not messages), so
// commands are a type byte and a JSON body, and a snapshot is the whole
// state as JSON. What changes every few seconds — which node leads a group,
// how far each has applied, whether a group is alive — is soft state of the
// metaserver leader (server/metaserver/health.go), never a Raft entry.
package meta
