package message

// AckRange is an inclusive range of one consumer's pull sequences
// (logs.PullEntry.PullSeq): how an ack, a nack or an extension names the
// messages it settles, in the requests of the wire protocol (transport) as
// in the commands the state machine applies (fsm), each with its own
// encoding. It lives here, beside the message format, so that neither the
// wire protocol nor the SDK depends on the storage package for it.
type AckRange struct{ First, Last int64 }
