// Package resolve keeps the addresses that endpoint hostnames resolve to, for
// backends the publisher writes as addresses rather than names (the HTTPRoute
// sink's endpointslice backend kind: a selector-less Service plus EndpointSlices
// holding the addresses of the cluster endpoint's hostname).
//
// # Contract
//
//   - An IP literal is used as it is (an IPv4-mapped IPv6 address is unmapped);
//     it is never looked up, cached or tracked.
//   - A hostname is validated before any lookup: at most [MaxHostLen] bytes (one
//     trailing dot allowed), labels of 1 to 63 letters, digits, '-' or '_' that
//     neither start nor end with '-'. Names are compared lowercase without the
//     trailing dot. An invalid name is an error wrapping [ErrInvalidHost].
//   - Addresses are returned sorted and deduplicated, IPv4-mapped addresses
//     unmapped, zones dropped, at most [MaxAddrs] of them.
//   - A failed lookup never empties a host: the last good addresses stay and
//     [Cache.Resolve] returns them with an [*Error] saying since when the host
//     fails. A lookup that returns no address and no error is a failure too.
//     Empty addresses with an [*Error] means the host never resolved.
//   - Owners (a map key "ns/name") declare the hosts they use with
//     [Cache.Track]; [Cache.Run] refreshes every tracked host when it is due:
//     after the record's TTL clamped to [Config.MinTTL]..[Config.MaxTTL] when the
//     lookup gives one, after [Config.Interval] otherwise; after a failure sooner,
//     MinTTL doubling up to Interval. When a host's address set changes, or it
//     starts or stops failing, Run calls the changed callback with the sorted
//     owners of that host, so they reconcile (level-triggered: they call
//     Resolve again).
//   - A host no owner tracks is forgotten. A host resolved but never tracked is
//     kept until it is due and then looked up again by the next Resolve (Run
//     never refreshes it and drops it once due).
//   - At most [MaxHosts] hosts are known at once; past that, Resolve returns an
//     error wrapping [ErrTooManyHosts] and Track does not track the extra hosts.
//
// # Concurrency
//
// A [Cache] is safe for concurrent use. One mutex guards all of its state; it is
// never held during a lookup or a call of changed. Concurrent Resolve calls for
// one host share one lookup, which runs on its own goroutine, is not canceled by
// any caller's context and ends within [Config.Timeout]. Run runs lookups on
// [Config.Workers] goroutines, calls changed from its own goroutine, and returns,
// with all of its lookups finished, when its context ends; a lookup cut short by
// that is not recorded as a failure.
//
// # Lookups
//
// The default lookup asks the nameservers of /etc/resolv.conf directly for A and
// AAAA records of the name (absolute, no search list) to learn the TTL, and falls
// back to the system resolver (no TTL: Interval applies) when that gives no
// answer. See [DNSLookup] and [SystemLookup].
package resolve
