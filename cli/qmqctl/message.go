package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/cli/internal/cmdline"
	"github.com/qmqgo/qmq/internal/limits"
)

const messageHelp = "Messages are read where they are stored, for as long as their broker group retains them, and\n" +
	"never consumed: no consumer group is created and nothing is handed out. `show` finds a message by\n" +
	"its id in every broker group; `list` and `browse` read one subject, by append time or from a\n" +
	"sequence (SEQUENCES ARE PER BROKER GROUP). A listing reads at most --budget entries of each\n" +
	"broker group and then says it was truncated: narrow the window, or continue from where it says.\n" +
	"`show` prints each message's timeline too: when it was sent, handed out, acked, nacked, dead\n" +
	"lettered... When the cluster checks applications, an application reads the messages of the\n" +
	"subjects it may send to or consume (an admin: every subject)."

// errNoMessage is the exit of a show that found nothing.
var errNoMessage = errors.New("no retained message has this id")

func messageCommand() *cli.Command {
	bodyFlag := &cli.StringFlag{Name: "body", Value: "text", Usage: "print the body as `text` (base64 when it is not UTF-8) or base64"}
	tagFlag := &cli.StringFlag{Name: "tag", Usage: "only messages carrying `TAG`"}
	keyFlag := &cli.StringFlag{Name: "key", Usage: "only messages whose key (the qmq.key property, Message.SetKey) is `KEY`"}
	propertyFlag := &cli.StringFlag{Name: "property", Usage: "only messages that have the property `NAME=VALUE`"}
	limitFlag := &cli.IntFlag{Name: "limit", Value: 100, Usage: fmt.Sprintf("at most `N` messages of each broker group (1..%d)", limits.MaxQueryResults)}
	budgetFlag := &cli.IntFlag{Name: "budget", Usage: fmt.Sprintf("read at most `N` entries of each broker group (default %d, at most %d)", limits.DefaultScanBudget, limits.MaxScanBudget)}
	sinceFlag := &cli.StringFlag{Name: "since", Usage: "appended at or after `TIME`: RFC 3339 (2026-01-31T09:00:00Z) or a duration ago (90m)"}
	untilFlag := &cli.StringFlag{Name: "until", Usage: "appended before `TIME`: RFC 3339 or a duration ago"}
	return &cli.Command{
		Name:        "message",
		Usage:       "find a message by id, list or browse a subject's messages, without consuming them",
		Description: messageHelp,
		Subcommands: []*cli.Command{{
			Name:            "show",
			Usage:           "show every retained message with an id: where it is stored, its properties, body and timeline",
			ArgsUsage:       "ID",
			Description:     messageHelp,
			Flags:           []cli.Flag{jsonFlag, bodyFlag, &cli.BoolFlag{Name: "no-timeline", Usage: "leave out what happened to each message"}},
			SkipFlagParsing: true,
			Action: withArg("the message's ID", func(c *cli.Context, id string) error {
				if err := checkBodyMode(c.String("body")); err != nil {
					return cmdline.Usagef(c, "%v", err)
				}
				return withAdmin(c, 30*time.Second, func(ctx context.Context, a *admin.Client) error {
					var opts []admin.FindOption
					if !c.Bool("no-timeline") {
						opts = append(opts, admin.WithTimeline())
					}
					found, err := a.FindMessage(ctx, id, true, opts...)
					if c.Bool("json") {
						if perr := printJSONTo(c.App.Writer, found); perr != nil {
							return perr
						}
					} else {
						for i := range found {
							printMessage(c.App.Writer, &found[i], c.String("body"))
							if !c.Bool("no-timeline") {
								if perr := printTimeline(c.App.Writer, &found[i]); perr != nil {
									return perr
								}
							}
						}
					}
					if err == nil && len(found) == 0 {
						return fmt.Errorf("%w: %q", errNoMessage, id)
					}
					return err
				})
			}),
		}, {
			Name:        "list",
			Usage:       "list a subject's messages appended in a time window, newest last",
			Description: messageHelp,
			Flags: []cli.Flag{subjectFlag, required(sinceFlag), untilFlag, tagFlag, keyFlag, propertyFlag, limitFlag, budgetFlag, jsonFlag,
				&cli.StringFlag{Name: "broker-group", Usage: "only the subject's messages in `BROKER-GROUP`"}},
			Action: func(c *cli.Context) error {
				q, err := messageQuery(c, time.Now())
				if err != nil {
					return err
				}
				return listMessages(c, q, func(pages []admin.MessagePage) error {
					w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
					fmt.Fprintln(w, "BROKER-GROUP\tSEQ\tAPPENDED\tID\tTAGS\tKEY\tSIZE")
					for _, p := range pages {
						for _, m := range p.Messages {
							fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\t%d\n", p.BrokerGroup, m.Seq, m.AppendedAt.Format(time.RFC3339Nano),
								m.ID, strings.Join(m.Tags, ","), m.Key, m.Size)
						}
					}
					return w.Flush()
				})
			},
		}, {
			Name:        "browse",
			Usage:       "read a subject's messages whole, from a sequence or a time, a page at a time",
			Description: messageHelp,
			Flags: []cli.Flag{subjectFlag, sinceFlag, untilFlag, tagFlag, keyFlag, propertyFlag, limitFlag, budgetFlag, jsonFlag, bodyFlag,
				&cli.StringFlag{Name: "broker-group", Usage: "the `BROKER-GROUP` to browse (needed with --from-seq when the subject lives in several)"},
				&cli.Int64Flag{Name: "from-seq", Value: -1, Usage: "start at sequence `N` of the broker group (default: the first retained, or --since)"}},
			Action: func(c *cli.Context) error {
				if err := checkBodyMode(c.String("body")); err != nil {
					return cmdline.Usagef(c, "%v", err)
				}
				q, err := messageQuery(c, time.Now())
				if err != nil {
					return err
				}
				q.Body = true
				return listMessages(c, q, func(pages []admin.MessagePage) error {
					for _, p := range pages {
						for i := range p.Messages {
							printMessage(c.App.Writer, &p.Messages[i], c.String("body"))
						}
					}
					return nil
				})
			},
		}},
	}
}

// listMessages runs q and prints its pages: as JSON with --json, else
// with print and where each broker group's listing goes on. A broker
// group that did not answer is the error, after the others' pages.
func listMessages(c *cli.Context, q admin.MessageQuery, print func([]admin.MessagePage) error) error {
	return withAdmin(c, 60*time.Second, func(ctx context.Context, a *admin.Client) error {
		pages, err := a.Messages(ctx, q)
		if c.Bool("json") {
			if pages == nil {
				pages = []admin.MessagePage{}
			}
			if perr := printJSONTo(c.App.Writer, pages); perr != nil {
				return perr
			}
			return err
		}
		if perr := print(pages); perr != nil {
			return perr
		}
		printPageEnds(c.App.Writer, pages)
		return err
	})
}

// messageQuery reads the flags of list and browse.
func messageQuery(c *cli.Context, now time.Time) (admin.MessageQuery, error) {
	q := admin.MessageQuery{Subject: c.String("subject"), BrokerGroup: c.String("broker-group"),
		Tag: c.String("tag"), Key: c.String("key"), Limit: c.Int("limit"), Budget: c.Int("budget")}
	if p := c.String("property"); p != "" {
		name, value, ok := strings.Cut(p, "=")
		if !ok || name == "" {
			return q, cmdline.Usagef(c, "--property %q: NAME=VALUE", p)
		}
		q.Property, q.PropertyValue = name, value
	}
	var err error
	if q.Since, err = admin.ParseTime(c.String("since"), now); err != nil {
		return q, cmdline.Usagef(c, "--since %v", err)
	}
	if q.Until, err = admin.ParseTime(c.String("until"), now); err != nil {
		return q, cmdline.Usagef(c, "--until %v", err)
	}
	if c.IsSet("from-seq") {
		if !q.Since.IsZero() {
			return q, cmdline.Usagef(c, "give --from-seq or --since, not both")
		}
		seq := c.Int64("from-seq")
		if seq < 0 {
			return q, cmdline.Usagef(c, "--from-seq %d: at least 0", seq)
		}
		q.FromSeq = &seq
	} else if q.Since.IsZero() {
		first := int64(0) // browse from the first retained message
		q.FromSeq = &first
	}
	switch {
	case q.Limit < 1 || q.Limit > limits.MaxQueryResults:
		return q, cmdline.Usagef(c, "--limit %d: 1..%d", q.Limit, limits.MaxQueryResults)
	case q.Budget < 0 || q.Budget > limits.MaxScanBudget:
		return q, cmdline.Usagef(c, "--budget %d: 1..%d", q.Budget, limits.MaxScanBudget)
	case !q.Until.IsZero() && !q.Until.After(q.Since):
		return q, cmdline.Usagef(c, "--until must be after --since")
	}
	return q, nil
}

func checkBodyMode(mode string) error {
	if mode != "text" && mode != "base64" {
		return fmt.Errorf("--body %q: text or base64", mode)
	}
	return nil
}

// printPageEnds says, per broker group, how much was read and where the
// listing goes on.
func printPageEnds(w io.Writer, pages []admin.MessagePage) {
	for _, p := range pages {
		fmt.Fprintf(w, "broker group %s: %s, %s read", p.BrokerGroup, plural(len(p.Messages), "message"), plural(p.Scanned, "entry"))
		switch {
		case p.Truncated:
			fmt.Fprintf(w, "; truncated: narrow the window, or continue with --broker-group %s --from-seq %d", p.BrokerGroup, p.Next)
		case p.Next >= 0:
			fmt.Fprintf(w, "; more from --broker-group %s --from-seq %d", p.BrokerGroup, p.Next)
		}
		fmt.Fprintln(w)
	}
}

// printMessage prints one stored message for people.
func printMessage(out io.Writer, m *admin.StoredMessage, bodyMode string) {
	fmt.Fprintf(out, "message %s of %s\n", m.ID, m.Subject)
	fmt.Fprintf(out, "  stored      broker group %s, sequence %d, offset %d, %d bytes, Raft index %d\n", m.BrokerGroup, m.Seq, m.Offset, m.Size, m.RaftIndex)
	fmt.Fprintf(out, "  created     %s\n  appended    %s\n", m.CreatedAt.Format(time.RFC3339Nano), m.AppendedAt.Format(time.RFC3339Nano))
	if len(m.Tags) > 0 {
		fmt.Fprintf(out, "  tags        %s\n", strings.Join(m.Tags, ","))
	}
	if m.Key != "" {
		fmt.Fprintf(out, "  key         %s\n", m.Key)
	}
	for _, p := range m.Properties {
		fmt.Fprintf(out, "  property    %s=%s\n", p.Key, p.Value)
	}
	switch {
	case m.BodyOmitted:
		fmt.Fprintf(out, "  body        (%d bytes, left out: the answer had no room; show it by its id)\n", m.BodySize)
	case bodyMode == "text" && utf8.Valid(m.Body):
		fmt.Fprintf(out, "  body        %s\n", m.Body)
	default:
		fmt.Fprintf(out, "  body (base64) %s\n", base64.StdEncoding.EncodeToString(m.Body))
	}
}

// printTimeline prints what happened to a message, oldest first, as a
// table under it.
func printTimeline(out io.Writer, m *admin.StoredMessage) error {
	if m.TimelineError != "" {
		_, err := fmt.Fprintf(out, "  timeline    could not be read: %s\n", m.TimelineError)
		return err
	}
	if len(m.Timeline) == 0 && !m.TimelineMore {
		_, err := fmt.Fprintln(out, "  timeline    no events recorded")
		return err
	}
	fmt.Fprintln(out, "  timeline")
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "    TIME\tEVENT\tGROUP\tCONSUMER\tDELIVERY\tRAFT-INDEX\tDETAIL")
	for _, e := range m.Timeline {
		delivery := ""
		if e.Delivery > 0 {
			delivery = fmt.Sprint(e.Delivery)
		}
		fmt.Fprintf(w, "    %s\t%s\t%s\t%s\t%s\t%d\t%s\n", e.At.Format(time.RFC3339Nano), e.Kind, e.ConsumerGroup, e.Consumer,
			delivery, e.RaftIndex, eventDetail(e))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if m.TimelineMore {
		_, err := fmt.Fprintf(out, "    … more events after these (a lookup answers at most %d, and fewer when its reply is full)\n", limits.MaxTimelineEvents)
		return err
	}
	return nil
}

// eventDetail is what a timeline event says besides its kind, group,
// consumer and delivery: who sent or acted, from where, when it is due.
func eventDetail(e admin.Event) string {
	var parts []string
	if e.App != "" {
		parts = append(parts, "app "+e.App)
	}
	if e.ClientAddress != "" {
		parts = append(parts, "from "+e.ClientAddress)
	}
	if !e.Due.IsZero() {
		when := "due "
		switch e.Kind {
		case "sent":
			when = "deliver at "
		case "nacked":
			when = "retry at "
		}
		parts = append(parts, when+e.Due.Format(time.RFC3339Nano))
	}
	return strings.Join(parts, ", ")
}
