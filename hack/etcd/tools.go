//go:build tools

// Package etcd pins the etcd server the integration tests run.
package etcd

import _ "go.etcd.io/etcd/server/v3"
