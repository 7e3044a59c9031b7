// Package kubernetes holds qmq's Kubernetes manifests (apply them with
// kubectl apply -k; docs/deployment.md says how). It has no code: its tests
// decode every manifest strictly into the Kubernetes API's types, check what
// the cluster depends on, and run the StatefulSets' and the Job's containers
// as processes on loopback.
package kubernetes
