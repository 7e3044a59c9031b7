// Package auth holds applications, their credentials and their rights:
// the records the metaserver replicates (App), and the table every node
// checks requests against (Table).
//
// An application is QMQ's app code: a name, one or two secrets (the
// current one and, for a while after a rotation, the one before it), and
// its rights: subjects it may send to, consumer groups of subjects it may
// consume as, whether it is an admin, and how many subjects and consumer
// groups it may create. Secrets are 256 random bits made by the server,
// never chosen by a person, so a salted SHA-256 stores them safely: a slow
// password hash would protect nothing more and would let a client that
// tries wrong secrets in a loop spend the server's CPU.
package auth
