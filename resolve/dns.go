package resolve

import (
	"context"
	"net"
	"net/netip"
	"time"
)

// SystemLookup resolves host with the system resolver (net.DefaultResolver,
// both address families). It gives no TTL (0).
func SystemLookup(ctx context.Context, host string) ([]netip.Addr, time.Duration, error) {
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	return addrs, 0, err
}

// DNSLookup is the default [LookupFunc]. For now it is [SystemLookup].
func DNSLookup(ctx context.Context, host string) ([]netip.Addr, time.Duration, error) {
	return SystemLookup(ctx, host)
}
