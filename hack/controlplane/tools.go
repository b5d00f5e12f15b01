//go:build tools

// Package controlplane pins the Kubernetes commands the integration tests run.
package controlplane

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
