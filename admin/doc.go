// Package admin is the operator API of a QMQ cluster: its broker groups
// and their nodes (status, membership, leadership, configuration,
// draining), where subjects live, consumer groups and their dead letters,
// delayed messages, and applications. qmqctl is built on it.
//
// A Client takes the address of any node, as the clients of package qmq
// do, and the same options, qmq.ConnOption (qmq.WithTLS,
// qmq.WithTLSConfig, qmq.WithApp: most requests need an admin
// application's):
//
//	a, err := admin.New("127.0.0.1:6222", qmq.WithTLS(files), qmq.WithApp("ops", secret))
//	c, err := a.Cluster(ctx)
//	for _, g := range c.BrokerGroups {
//		fmt.Println(g.Name, g.Leader, g.Writable)
//	}
//
// Two kinds of group meet here, each with its one word. A broker group is
// a Raft group of broker nodes that stores some subjects' messages
// (BrokerGroupStatus, BrokerGroupConfig, SetWritable; parameters named
// brokerGroup); MetaGroup names the metaserver's own. A consumer group
// consumes a subject, each message once within the group
// (ConsumerGroupView, SetConsumerGroup, DeadLetters; parameters named
// consumerGroup). Every broker group of a subject holds its own part of
// each of the subject's consumer groups, so the consumer-group methods ask
// each one and answer per broker group.
//
// Errors are the SDK's, matched with errors.Is: qmq.ErrInvalidName for a
// name that breaks the naming rule, qmq.ErrUnauthenticated and
// qmq.ErrPermissionDenied for a cluster's refusal, qmq.ErrUnreachable when
// no node answers; and this package's ErrNoConsumerGroup, ErrNoDeadLetter
// and ErrNotInRoute. A node's answer is also a *qmq.Error with its code.
//
// The options are package qmq's own, not copies: a Client connects as a
// Producer given the same options would. Package qmq hands admin what
// they say through an internal package both import, so that an option
// added to qmq reaches the admin with nothing to duplicate, and qmq's API
// gains no accessor that only this package needs.
package admin
