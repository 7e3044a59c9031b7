package fsm

import (
	"slices"

	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/logs"
)

// tagFilter is a pull's tag condition: a message matches if it has any of
// the tags, or with all every one of them (QMQ's tagType OR and AND).
type tagFilter struct {
	tags []string
	mask uint64 // message.TagMask of tags
	all  bool
}

// newTagFilter returns the filter of a pull's tags; nil for none (every
// message matches).
func newTagFilter(tags []string, all bool) *tagFilter {
	if len(tags) == 0 {
		return nil
	}
	return &tagFilter{tags: tags, mask: message.TagMask(tags), all: all}
}

// matches reports whether the message of consume-log entry e matches.
// The consume log's tag mask settles most misses without reading the
// message (a tag it lacks clears a bit the filter needs); every possible
// hit is confirmed on the message's own tags, since distinct tags may share
// a bit.
func (t *tagFilter) matches(f *FSM, e logs.ConsumeEntry) bool {
	if t.all && e.TagMask&t.mask != t.mask || !t.all && e.TagMask&t.mask == 0 {
		return false
	}
	m := must(f.store.messages.Read(e.Offset, e.Size))
	if t.all {
		for _, tag := range t.tags {
			if !slices.Contains(m.Tags, tag) {
				return false
			}
		}
		return true
	}
	for _, tag := range t.tags {
		if slices.Contains(m.Tags, tag) {
			return true
		}
	}
	return false
}
