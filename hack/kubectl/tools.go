//go:build tools

// Package kubectl pins the kubectl the docs test (integration/docsrun_test.go) runs the
// how-to guides' commands with: the same Kubernetes version as the control plane.
package kubectl

import _ "k8s.io/kubernetes/cmd/kubectl"
