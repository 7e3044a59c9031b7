package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// ombResult is an OMB run's result with OMB's field names (its
// TestResult): one value per period in the lists, latencies in
// milliseconds, and the aggregated figures of the whole measured phase.
// OMB's publish-delay figures are left out; the fields after Aggregated…
// are qmq's additions.
type ombResult struct {
	Workload          string `json:"workload"`
	Driver            string `json:"driver"`
	MessageSize       int    `json:"messageSize"`
	Topics            int    `json:"topics"`
	Partitions        int    `json:"partitions"`
	ProducersPerTopic int    `json:"producersPerTopic"`
	ConsumersPerTopic int    `json:"consumersPerTopic"`

	PublishRate      []float64 `json:"publishRate"`
	PublishErrorRate []float64 `json:"publishErrorRate"`
	ConsumeRate      []float64 `json:"consumeRate"`
	Backlog          []int64   `json:"backlog"`

	PublishLatencyAvg     []float64 `json:"publishLatencyAvg"`
	PublishLatency50pct   []float64 `json:"publishLatency50pct"`
	PublishLatency75pct   []float64 `json:"publishLatency75pct"`
	PublishLatency95pct   []float64 `json:"publishLatency95pct"`
	PublishLatency99pct   []float64 `json:"publishLatency99pct"`
	PublishLatency999pct  []float64 `json:"publishLatency999pct"`
	PublishLatency9999pct []float64 `json:"publishLatency9999pct"`
	PublishLatencyMax     []float64 `json:"publishLatencyMax"`

	EndToEndLatencyAvg     []float64 `json:"endToEndLatencyAvg"`
	EndToEndLatency50pct   []float64 `json:"endToEndLatency50pct"`
	EndToEndLatency75pct   []float64 `json:"endToEndLatency75pct"`
	EndToEndLatency95pct   []float64 `json:"endToEndLatency95pct"`
	EndToEndLatency99pct   []float64 `json:"endToEndLatency99pct"`
	EndToEndLatency999pct  []float64 `json:"endToEndLatency999pct"`
	EndToEndLatency9999pct []float64 `json:"endToEndLatency9999pct"`
	EndToEndLatencyMax     []float64 `json:"endToEndLatencyMax"`

	AggregatedPublishLatencyAvg       float64            `json:"aggregatedPublishLatencyAvg"`
	AggregatedPublishLatency50pct     float64            `json:"aggregatedPublishLatency50pct"`
	AggregatedPublishLatency75pct     float64            `json:"aggregatedPublishLatency75pct"`
	AggregatedPublishLatency95pct     float64            `json:"aggregatedPublishLatency95pct"`
	AggregatedPublishLatency99pct     float64            `json:"aggregatedPublishLatency99pct"`
	AggregatedPublishLatency999pct    float64            `json:"aggregatedPublishLatency999pct"`
	AggregatedPublishLatency9999pct   float64            `json:"aggregatedPublishLatency9999pct"`
	AggregatedPublishLatencyMax       float64            `json:"aggregatedPublishLatencyMax"`
	AggregatedPublishLatencyQuantiles map[string]float64 `json:"aggregatedPublishLatencyQuantiles"`

	AggregatedEndToEndLatencyAvg       float64            `json:"aggregatedEndToEndLatencyAvg"`
	AggregatedEndToEndLatency50pct     float64            `json:"aggregatedEndToEndLatency50pct"`
	AggregatedEndToEndLatency75pct     float64            `json:"aggregatedEndToEndLatency75pct"`
	AggregatedEndToEndLatency95pct     float64            `json:"aggregatedEndToEndLatency95pct"`
	AggregatedEndToEndLatency99pct     float64            `json:"aggregatedEndToEndLatency99pct"`
	AggregatedEndToEndLatency999pct    float64            `json:"aggregatedEndToEndLatency999pct"`
	AggregatedEndToEndLatency9999pct   float64            `json:"aggregatedEndToEndLatency9999pct"`
	AggregatedEndToEndLatencyMax       float64            `json:"aggregatedEndToEndLatencyMax"`
	AggregatedEndToEndLatencyQuantiles map[string]float64 `json:"aggregatedEndToEndLatencyQuantiles"`

	// qmq's additions: the measured phase's length and mean rates (acknowledged sends,
	// and receipts by every subscription), the backlog at its end, the
	// messages, the subscriptions a topic, and the longest stretch with neither an ack nor a receipt.
	SubscriptionsPerTopic int     `json:"subscriptionsPerTopic"`
	MeasuredSeconds       float64 `json:"measuredSeconds"`
	AggregatedPublishRate float64 `json:"aggregatedPublishRate"`
	AggregatedConsumeRate float64 `json:"aggregatedConsumeRate"`
	MessagesPublished     int64   `json:"messagesPublished"`
	MessagesReceived      int64   `json:"messagesReceived"`
	PublishErrors         int64   `json:"publishErrors"`
	FinalBacklog          int64   `json:"finalBacklog"`
	MaxStallMs            float64 `json:"maxStallMs"`
	Note                  string  `json:"note,omitempty"`
}

// ombQuantiles are the quantiles of the Aggregated…Quantiles maps.
var ombQuantiles = []float64{50, 75, 90, 95, 99, 99.9, 99.99, 100}

func newOMBResult(w *ombWorkload) *ombResult {
	return &ombResult{Workload: w.Name, Driver: "qmq", MessageSize: w.MessageSize, Topics: w.Topics,
		Partitions: w.PartitionsPerTopic, ProducersPerTopic: w.ProducersPerTopic, ConsumersPerTopic: w.ConsumerPerSubscription,
		SubscriptionsPerTopic: w.SubscriptionsPerTopic,
		PublishRate:           []float64{}, PublishErrorRate: []float64{}, ConsumeRate: []float64{}, Backlog: []int64{},
		PublishLatencyAvg: []float64{}, PublishLatency50pct: []float64{}, PublishLatency75pct: []float64{}, PublishLatency95pct: []float64{},
		PublishLatency99pct: []float64{}, PublishLatency999pct: []float64{}, PublishLatency9999pct: []float64{}, PublishLatencyMax: []float64{},
		EndToEndLatencyAvg: []float64{}, EndToEndLatency50pct: []float64{}, EndToEndLatency75pct: []float64{}, EndToEndLatency95pct: []float64{},
		EndToEndLatency99pct: []float64{}, EndToEndLatency999pct: []float64{}, EndToEndLatency9999pct: []float64{}, EndToEndLatencyMax: []float64{},
	}
}

func pct(h *latencyHistogram, p float64) float64 { return ms(h.percentile(p)) }

func (res *ombResult) addPeriod(l ombLine) {
	res.PublishRate = append(res.PublishRate, l.pubRate)
	res.PublishErrorRate = append(res.PublishErrorRate, l.errRate)
	res.ConsumeRate = append(res.ConsumeRate, l.consRate)
	res.Backlog = append(res.Backlog, l.backlog)
	appendLatencies(l.pub, &res.PublishLatencyAvg, &res.PublishLatency50pct, &res.PublishLatency75pct, &res.PublishLatency95pct,
		&res.PublishLatency99pct, &res.PublishLatency999pct, &res.PublishLatency9999pct, &res.PublishLatencyMax)
	appendLatencies(l.e2e, &res.EndToEndLatencyAvg, &res.EndToEndLatency50pct, &res.EndToEndLatency75pct, &res.EndToEndLatency95pct,
		&res.EndToEndLatency99pct, &res.EndToEndLatency999pct, &res.EndToEndLatency9999pct, &res.EndToEndLatencyMax)
}

// ombFieldQuantiles are the quantiles OMB gives a field each, after the
// average: 50, 75, 95, 99, 99.9, 99.99 and the maximum.
var ombFieldQuantiles = []float64{50, 75, 95, 99, 99.9, 99.99, 100}

// appendLatencies appends h's average to avg and its ombFieldQuantiles
// to fields, in order.
func appendLatencies(h *latencyHistogram, avg *[]float64, fields ...*[]float64) {
	*avg = append(*avg, ms(h.mean()))
	for i, q := range ombFieldQuantiles {
		*fields[i] = append(*fields[i], pct(h, q))
	}
}

// setLatencies sets avg to h's average and fields to its
// ombFieldQuantiles, in order.
func setLatencies(h *latencyHistogram, avg *float64, fields ...*float64) {
	*avg = ms(h.mean())
	for i, q := range ombFieldQuantiles {
		*fields[i] = pct(h, q)
	}
}

// aggregate fills in the measured phase's figures.
func (res *ombResult) aggregate(r *ombRun, elapsed time.Duration, sent, received int64) {
	p, e := r.pubAll, r.e2eAll
	setLatencies(p, &res.AggregatedPublishLatencyAvg, &res.AggregatedPublishLatency50pct, &res.AggregatedPublishLatency75pct,
		&res.AggregatedPublishLatency95pct, &res.AggregatedPublishLatency99pct, &res.AggregatedPublishLatency999pct,
		&res.AggregatedPublishLatency9999pct, &res.AggregatedPublishLatencyMax)
	setLatencies(e, &res.AggregatedEndToEndLatencyAvg, &res.AggregatedEndToEndLatency50pct, &res.AggregatedEndToEndLatency75pct,
		&res.AggregatedEndToEndLatency95pct, &res.AggregatedEndToEndLatency99pct, &res.AggregatedEndToEndLatency999pct,
		&res.AggregatedEndToEndLatency9999pct, &res.AggregatedEndToEndLatencyMax)
	res.AggregatedPublishLatencyQuantiles = map[string]float64{}
	res.AggregatedEndToEndLatencyQuantiles = map[string]float64{}
	for _, q := range ombQuantiles {
		k := strconv.FormatFloat(q, 'f', -1, 64)
		res.AggregatedPublishLatencyQuantiles[k] = pct(p, q)
		res.AggregatedEndToEndLatencyQuantiles[k] = pct(e, q)
	}
	res.MeasuredSeconds = elapsed.Seconds()
	if s := elapsed.Seconds(); s > 0 {
		res.AggregatedPublishRate = float64(sent) / s
		res.AggregatedConsumeRate = float64(received) / s
	}
	res.MessagesPublished, res.MessagesReceived, res.PublishErrors = sent, received, r.failed.Load()
	res.FinalBacklog = max(r.sent.Load()*int64(r.w.SubscriptionsPerTopic)-r.received.Load(), 0)
}

// write prints the result: its JSON, or OMB's closing lines.
func (res *ombResult) write(w io.Writer, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	var b strings.Builder
	line := func(what string, avg, p50, p75, p95, p99, p999, p9999, max float64) {
		fmt.Fprintf(&b, "----- Aggregated %s Latency (ms) avg: %s - 50%%: %s - 75%%: %s - 95%%: %s - 99%%: %s - 99.9%%: %s - 99.99%%: %s - Max: %s\n",
			what, fmtMs(avg), fmtMs(p50), fmtMs(p75), fmtMs(p95), fmtMs(p99), fmtMs(p999), fmtMs(p9999), fmtMs(max))
	}
	fmt.Fprintf(&b, "----- workload %q on qmq: %d topics, %d producers and %d subscriptions × %d consumers a topic, %d B messages\n",
		res.Workload, res.Topics, res.ProducersPerTopic, res.SubscriptionsPerTopic, res.ConsumersPerTopic, res.MessageSize)
	line("Pub", res.AggregatedPublishLatencyAvg, res.AggregatedPublishLatency50pct, res.AggregatedPublishLatency75pct, res.AggregatedPublishLatency95pct,
		res.AggregatedPublishLatency99pct, res.AggregatedPublishLatency999pct, res.AggregatedPublishLatency9999pct, res.AggregatedPublishLatencyMax)
	line("E2E", res.AggregatedEndToEndLatencyAvg, res.AggregatedEndToEndLatency50pct, res.AggregatedEndToEndLatency75pct, res.AggregatedEndToEndLatency95pct,
		res.AggregatedEndToEndLatency99pct, res.AggregatedEndToEndLatency999pct, res.AggregatedEndToEndLatency9999pct, res.AggregatedEndToEndLatencyMax)
	fmt.Fprintf(&b, "----- Pub rate %.1f msg/s, Cons rate %.1f msg/s (every subscription's receipts), %d published, %d received, %d errors, backlog at the end %d, max stall %s ms\n",
		res.AggregatedPublishRate, res.AggregatedConsumeRate, res.MessagesPublished, res.MessagesReceived, res.PublishErrors, res.FinalBacklog, fmtMs(res.MaxStallMs))
	if res.Note != "" {
		fmt.Fprintf(&b, "----- note: %s\n", res.Note)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
