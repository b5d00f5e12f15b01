// Package lieplant plants lies in the publisher, so that the chaos harness
// (integration/chaos -plant, -mutation) can show its checker catches them.
//
// Only a binary built with the build tag lieplant plants anything, and then only the kind
// the environment variable EnvVar names. Without the tag On is the constant false: every
// hook, written as
//
//	if lieplant.On && lieplant.Is(lieplant.KindX) { ... }
//
// is dead code the compiler removes, and the default binary holds nothing of this package.
package lieplant

import "strings"

// EnvVar names the kind a binary built with the tag plants.
const EnvVar = "TRAFFICMAP_LIEPLANT"

// Kind is one planted lie.
type Kind string

// The kinds of lies, each hooked at one place of the publisher.
const (
	// KindPrematureAccept: the HTTPRoute sink confirms a stored route without reading the
	// gateway's verdict on it (httproute.Sink.judge).
	KindPrematureAccept Kind = "premature-accept"
	// KindUnackedClient: the xDS sink counts one relevant client that has not ACKed as
	// confirmed (xds.Confirm).
	KindUnackedClient Kind = "unacked-client"
	// KindIgnoredInput: once a map was True, the drain annotation and the taints it was
	// published with are kept for good; later changes of them are ignored, also after
	// `publisher drain` or `taint` flipped it False (publish reconcile).
	KindIgnoredInput Kind = "ignored-input"
	// KindFlavourWeight: the gRPC flavour serves the first positive entry one more than
	// its weight; the route and the Envoy flavour are right (xds translateGRPCService).
	KindFlavourWeight Kind = "flavour-weight"
	// KindDroppedCluster: the gRPC flavour's first cluster is left out of CDS after
	// validation, while its routes still name it (xds.Server.SetResources).
	KindDroppedCluster Kind = "dropped-cluster"
	// KindRivalName: the route names a hostname the map does not hold (RivalName)
	// instead of its own (httproute.Build).
	KindRivalName Kind = "rival-name"
)

// Kinds lists every kind, in the order the harness plants them.
func Kinds() []Kind {
	return []Kind{KindPrematureAccept, KindUnackedClient, KindIgnoredInput, KindFlavourWeight, KindDroppedCluster, KindRivalName}
}

// RivalName is a hostname next to host that its map does not hold: host with "rival-"
// before its first label.
func RivalName(host string) string {
	if host == "" || strings.HasPrefix(host, "*") {
		return host
	}
	return "rival-" + host
}
