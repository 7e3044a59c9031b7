package logs

// AckRange is an inclusive range of one consumer's pull sequences
// (PullEntry.PullSeq): what an ack, a nack or an extension names, in the
// requests of the wire protocol (transport) as in the commands the state
// machine applies (fsm), each with its own encoding.
type AckRange struct{ First, Last int64 }
