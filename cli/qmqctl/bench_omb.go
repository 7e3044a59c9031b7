package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"go.yaml.in/yaml/v3"
)

// errWorkload is what every refusal of an OMB workload file wraps.
var errWorkload = errors.New("qmqctl: bad workload")

// Bounds of an OMB workload run here. They keep what one qmqctl process
// holds bounded: producers and subscriptions are goroutines and
// connections, each producer holds up to --inflight message bodies.
const (
	maxOMBTopics        = 1000
	maxOMBClients       = 1000 // producers in all, and subscriptions in all
	maxOMBMessageSize   = 1 << 20
	maxOMBPayloadPool   = 256 << 20 // bytes of randomized payloads
	maxOMBMinutes       = 24 * 60
	maxOMBPartitions    = 10000
	defaultOMBPoolSize  = 1000
	ombKeyNone          = "NO_KEY"
	ombKeyRoundRobin    = "KEY_ROUND_ROBIN"
	ombKeyRandomNano    = "RANDOM_NANO"
	ombMinMessageSize   = stampSize // the body carries its send time
	ombDefaultPeriod    = 10 * time.Second
	ombMaxPeriod        = time.Hour
	ombMinPeriod        = 100 * time.Millisecond
	ombMaxDurationGiven = maxOMBMinutes * time.Minute
)

// ombWorkload is an OpenMessaging Benchmark workload file: the fields OMB
// defines that mean something here. Any other field is refused.
type ombWorkload struct {
	Name   string `yaml:"name"`
	Topics int    `yaml:"topics"`
	// PartitionsPerTopic is checked and ignored: a qmq subject has no
	// partitions (its broker groups share it, and any consumer of a group
	// takes any message).
	PartitionsPerTopic int `yaml:"partitionsPerTopic"`
	// KeyDistributor is checked and ignored: qmq messages have no key.
	KeyDistributor        string  `yaml:"keyDistributor"`
	MessageSize           int     `yaml:"messageSize"`
	UseRandomizedPayloads bool    `yaml:"useRandomizedPayloads"`
	RandomBytesRatio      float64 `yaml:"randomBytesRatio"`
	// RandomizedPayloadPoolSize: how many distinct random payloads
	// (default 1,000).
	RandomizedPayloadPoolSize int `yaml:"randomizedPayloadPoolSize"`
	// PayloadFile is accepted and ignored: bodies are MessageSize bytes
	// made here, their first 8 the send time.
	PayloadFile             string `yaml:"payloadFile"`
	SubscriptionsPerTopic   int    `yaml:"subscriptionsPerTopic"`
	ConsumerPerSubscription int    `yaml:"consumerPerSubscription"`
	ProducersPerTopic       int    `yaml:"producersPerTopic"`
	// ProducerRate is msgs/s over all producers; 0 sends as fast as each
	// producer's window allows (OMB searches for the highest rate the
	// consumers keep up with instead: not done here).
	ProducerRate int64 `yaml:"producerRate"`
	// ConsumerBacklogSizeGB must be 0: building a backlog before the
	// consumers start is not done here.
	ConsumerBacklogSizeGB float64 `yaml:"consumerBacklogSizeGB"`
	TestDurationMinutes   int     `yaml:"testDurationMinutes"`
	WarmupDurationMinutes int     `yaml:"warmupDurationMinutes"`
}

// readWorkload reads and checks a workload file.
func readWorkload(path string) (*ombWorkload, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errWorkload, err)
	}
	defer f.Close()
	// A workload file is a few hundred bytes: a megabyte is plenty.
	data, err := io.ReadAll(io.LimitReader(f, 1<<20+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errWorkload, path, err)
	}
	if len(data) > 1<<20 {
		return nil, fmt.Errorf("%w: %s is over 1 MiB", errWorkload, path)
	}
	w, err := parseWorkload(data)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return w, nil
}

// parseWorkload decodes a workload, refusing fields it does not know and
// values it cannot run.
func parseWorkload(data []byte) (*ombWorkload, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var w ombWorkload
	if err := dec.Decode(&w); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: the file is empty", errWorkload)
		}
		return nil, fmt.Errorf("%w: %w", errWorkload, err)
	}
	var more any
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: one YAML document expected, found more", errWorkload)
	}
	return &w, w.check()
}

// check reports the first value the workload cannot run with.
func (w *ombWorkload) check() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{errWorkload}, args...)...)
	}
	switch {
	case w.Name == "":
		return bad("name is missing")
	case w.Topics < 1 || w.Topics > maxOMBTopics:
		return bad("topics %d: within 1..%d", w.Topics, maxOMBTopics)
	case w.PartitionsPerTopic < 1 || w.PartitionsPerTopic > maxOMBPartitions:
		return bad("partitionsPerTopic %d: within 1..%d (it is ignored: a qmq subject has no partitions)", w.PartitionsPerTopic, maxOMBPartitions)
	case w.KeyDistributor != "" && w.KeyDistributor != ombKeyNone && w.KeyDistributor != ombKeyRoundRobin && w.KeyDistributor != ombKeyRandomNano:
		return bad("keyDistributor %q: one of %s, %s, %s (it is ignored: qmq messages have no key)", w.KeyDistributor, ombKeyNone, ombKeyRoundRobin, ombKeyRandomNano)
	case w.MessageSize < ombMinMessageSize || w.MessageSize > maxOMBMessageSize:
		return bad("messageSize %d: within %d..%d bytes (the first %d carry the send time)", w.MessageSize, ombMinMessageSize, maxOMBMessageSize, stampSize)
	case w.RandomBytesRatio < 0 || w.RandomBytesRatio > 1:
		return bad("randomBytesRatio %g: within 0..1", w.RandomBytesRatio)
	case w.RandomizedPayloadPoolSize < 0:
		return bad("randomizedPayloadPoolSize %d cannot be negative", w.RandomizedPayloadPoolSize)
	case w.UseRandomizedPayloads && int64(w.poolSize())*int64(w.MessageSize) > maxOMBPayloadPool:
		return bad("randomizedPayloadPoolSize %d × messageSize %d: over %d MiB of payloads", w.poolSize(), w.MessageSize, maxOMBPayloadPool>>20)
	case w.SubscriptionsPerTopic < 0:
		return bad("subscriptionsPerTopic %d cannot be negative", w.SubscriptionsPerTopic)
	case w.SubscriptionsPerTopic > 0 && w.ConsumerPerSubscription < 1:
		return bad("consumerPerSubscription %d: at least 1 with subscriptions", w.ConsumerPerSubscription)
	case w.ConsumerPerSubscription < 0:
		return bad("consumerPerSubscription %d cannot be negative", w.ConsumerPerSubscription)
	case int64(w.Topics)*int64(w.SubscriptionsPerTopic)*int64(w.ConsumerPerSubscription) > maxOMBClients:
		return bad("topics × subscriptionsPerTopic × consumerPerSubscription = %d consumers: at most %d",
			int64(w.Topics)*int64(w.SubscriptionsPerTopic)*int64(w.ConsumerPerSubscription), maxOMBClients)
	case w.ProducersPerTopic < 1:
		return bad("producersPerTopic %d: at least 1", w.ProducersPerTopic)
	case int64(w.Topics)*int64(w.ProducersPerTopic) > maxOMBClients:
		return bad("topics × producersPerTopic = %d producers: at most %d", int64(w.Topics)*int64(w.ProducersPerTopic), maxOMBClients)
	case w.ProducerRate < 0 || w.ProducerRate > maxBenchRate:
		return bad("producerRate %d: within 0..%d msgs/s (0: as fast as the window allows)", w.ProducerRate, maxBenchRate)
	case w.ConsumerBacklogSizeGB != 0:
		return bad("consumerBacklogSizeGB %g: only 0 (backlog-drain runs are not supported)", w.ConsumerBacklogSizeGB)
	case w.TestDurationMinutes < 0 || w.TestDurationMinutes > maxOMBMinutes:
		return bad("testDurationMinutes %d: within 1..%d", w.TestDurationMinutes, maxOMBMinutes)
	case w.WarmupDurationMinutes < 0 || w.WarmupDurationMinutes > maxOMBMinutes:
		return bad("warmupDurationMinutes %d: within 0..%d", w.WarmupDurationMinutes, maxOMBMinutes)
	}
	return nil
}

func (w *ombWorkload) poolSize() int {
	if w.RandomizedPayloadPoolSize == 0 {
		return defaultOMBPoolSize
	}
	return w.RandomizedPayloadPoolSize
}
