// Package message is the format of one message (and of the AckRange that
// names messages a consumer settles), shared by everything that
// carries or keeps one: the SDK encodes it, the wire protocol frames it,
// the state machine checks it and the message log stores it. It sits below
// all of them, so none depends on another's package for the format.
//
// A message is encoded once, by the producer, and the same bytes travel in
// the send request and the Raft entry and, with two stamps replaced
// (AppendStamped), land in the message log: the leader and every replica
// check the message (Check, by ReadWire as they decode it) but never encode
// it again. The limits of each field are here (MaxTags, MaxBodyLen, …) and
// are what the decoder enforces, so a hostile encoding is refused before
// it is allocated.
package message
