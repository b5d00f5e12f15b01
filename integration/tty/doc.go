// Package tty holds the operator-command tests that need a pseudo-terminal: the drain and
// undrain confirmation prompt, answered as an operator would type. It is its own module
// (integration/tty/go.mod, with a replace to the repository's root), so the publisher's
// go.mod never depends on github.com/creack/pty; make test runs it. It runs the publisher
// binary against a real kube-apiserver and etcd (envtest), as integration/ does.
package tty
