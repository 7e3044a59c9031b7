// Package logs is the broker's storage: segmented, checksummed,
// append-only logs, and the three typed logs of QMQ's storage model built on
// them.
//
//   - Log: the one generic segmented log. Records are len | crc32c | payload
//     in segment files named by base offset; segments roll at a size and are
//     immutable once sealed; a torn tail is truncated on open; one writer,
//     lock-free readers.
//   - MessageLog: every subject's messages, variable-size records.
//   - ConsumeLog: one per subject, fixed-size entries pointing into the
//     message log; the entry number is the subject's sequence.
//   - PullLog: every consumer's pull log merged into one file of fixed-size
//     entries, so that the number of consumers is not the number of files.
//   - Files: a bounded cache of open segment files shared by the logs of a
//     store, so that the number of subjects is not the number of open files.
//
// Nothing here reads the clock: times (retention's "now") are arguments, so
// that replicas applying the same commands make the same decisions. See
// DESIGN.md in this directory for the reasons behind the layout.
package logs
