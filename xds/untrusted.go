package xds

import (
	"fmt"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/trafficmap/publisher/model/untrusted"
)

// Every field of a discovery request is chosen by the client, so it is checked before the
// tracker, the cache or a metric makes anything of it: a type URL must be one of the xDS
// API's resource types (knownTypes) and, on a per-type stream, that stream's type; a
// request is at most Limits.MaxRequestBytes, may name at most Limits.MaxNames resources of
// at most maxNameBytes each, and carry a version of at most maxVersionBytes. A delta
// stream's initial_resource_versions are bounded by the request's size alone: a client
// reconnecting declares every resource it holds, which for an Envoy's wildcard clusters is
// the whole fleet's (80,000 at 10,000 maps of 8 clusters), and the tracker keeps only the
// declared names the server serves. A request that breaks a rule ends its stream
// with a status naming the field and the rule (InvalidArgument, or ResourceExhausted for a
// limit), counted by reason (trafficmap_publisher_xds_refused_requests_total). What a
// client chose is shown only escaped and shortened (package untrusted).

// knownTypes are the resource types of the xDS API (v3) a client may subscribe to, with
// their metric labels: the three the publisher serves, and the others an Envoy may ask for
// on an ADS stream (they are never answered, as before). Any other type URL is refused:
// it never becomes a metric label, a watch or tracker state.
var knownTypes = map[string]string{
	resource.ListenerType:        "Listener",
	resource.RouteType:           "RouteConfiguration",
	resource.ClusterType:         "Cluster",
	resource.EndpointType:        "ClusterLoadAssignment",
	resource.ScopedRouteType:     "ScopedRouteConfiguration",
	resource.VirtualHostType:     "VirtualHost",
	resource.SecretType:          "Secret",
	resource.ExtensionConfigType: "TypedExtensionConfig",
	resource.RuntimeType:         "Runtime",
	resource.ThriftRouteType:     "ThriftRouteConfiguration",
	resource.RateLimitConfigType: "RateLimitConfig",
}

// otherLabel is the label of a type URL outside knownTypes (never one a client chose).
const otherLabel = "other"

// typeLabel shortens a known type URL to its message name, e.g. "Cluster"; otherLabel for
// any other string. It never panics and its results are a fixed set.
func typeLabel(typeURL string) string {
	if l, ok := knownTypes[typeURL]; ok {
		return l
	}
	return otherLabel
}

// Limits bound what one client may make the xDS server hold and do; the zero value of a
// field means its default.
type Limits struct {
	// MaxNames bounds the resource names one stream subscribes to, per type (a
	// state-of-the-world request's resource_names; a delta stream's subscription after
	// each request). Default DefaultMaxNames.
	MaxNames int
	// MaxRequestBytes bounds one request's encoded size (gRPC's receive limit): a larger
	// request ends its stream with ResourceExhausted before it is decoded. Default
	// DefaultMaxRequestBytes.
	MaxRequestBytes int
	// MaxStreamsPerConnection bounds the concurrent streams of one connection (HTTP/2
	// SETTINGS_MAX_CONCURRENT_STREAMS: a client queues the streams beyond it). Default
	// DefaultMaxStreamsPerConnection.
	MaxStreamsPerConnection uint32
	// MaxConnectionsPerClient bounds the connections with open streams of one client: its
	// certificate identity with mutual TLS, else its peer IP address. A stream on a further
	// connection is refused. Default DefaultMaxConnectionsPerClient; negative: no limit.
	MaxConnectionsPerClient int
}

// Defaults of Limits (and of the --xds-max-* flags).
const (
	// DefaultMaxNames: a proxyless gRPC process subscribes to one listener per target it
	// dials, one route configuration per listener and the clusters those route to; an
	// Envoy subscribes to the listeners and clusters by wildcard and to a route
	// configuration by name. 10,000 names is well above both, and bounds a stream's
	// subscription to a few MB of names.
	DefaultMaxNames = 10000
	// DefaultMaxStreamsPerConnection: a client opens one ADS stream, or one stream per
	// type (three to five) with per-type xDS, per connection; 100 is the least HTTP/2
	// recommends a server allow (RFC 9113, 6.5.2), and leaves room for a proxy or test
	// that carries many clients' streams on one connection.
	DefaultMaxStreamsPerConnection = 100
	// DefaultMaxConnectionsPerClient: clients of one workload share an identity (a
	// SPIFFE ID names a service account), one connection per replica.
	DefaultMaxConnectionsPerClient = 1024
	// DefaultMaxRequestBytes: a delta Envoy reconnecting declares every resource it holds
	// (initial_resource_versions: a name and a version, about 50 to 80 bytes a cluster), 3.7
	// MB for 80,000 clusters of short names, above gRPC's default of 4 MiB with longer ones.
	// 16 MiB holds about 200,000: 25,000 maps of 8 clusters.
	DefaultMaxRequestBytes = 16 << 20
)

// Bounds of single request fields.
const (
	// maxNameBytes bounds one resource name (a cluster name is "namespace/name/cluster":
	// at most 63+253+63 bytes; a listener name a hostname or an xdstp URL).
	maxNameBytes = 1024
	// maxVersionBytes bounds a request's version_info (the publisher's versions are
	// digests of a few dozen bytes).
	maxVersionBytes = 1024
)

// withDefaults is l with every zero field set to its default.
func (l Limits) withDefaults() Limits {
	if l.MaxNames <= 0 {
		l.MaxNames = DefaultMaxNames
	}
	if l.MaxRequestBytes <= 0 {
		l.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if l.MaxStreamsPerConnection == 0 {
		l.MaxStreamsPerConnection = DefaultMaxStreamsPerConnection
	}
	if l.MaxConnectionsPerClient == 0 {
		l.MaxConnectionsPerClient = DefaultMaxConnectionsPerClient
	}
	return l
}

// Reasons a request or stream is refused: the values of the refused metric's label.
const (
	refusedUnknownType = "unknown_type"
	refusedWrongType   = "wrong_type"
	refusedNames       = "too_many_names"
	refusedField       = "field_too_long"
	refusedConnections = "too_many_connections"
)

// refusedReasons are every reason, so each series exists from the start.
var refusedReasons = []string{refusedUnknownType, refusedWrongType, refusedNames, refusedField, refusedConnections}

// refusal is a request refused for reason, with the status that ends its stream.
type refusal struct {
	reason string
	err    error
}

func (r *refusal) Error() string { return r.err.Error() }

// counted counts r with count (when both are set) and returns it as the error that ends its
// stream: nil when r is nil.
func (r *refusal) counted(count func(reason string)) error {
	if r == nil {
		return nil
	}
	if count != nil {
		count(r.reason)
	}
	return r
}

// GRPCStatus makes the refusal the stream's status.
func (r *refusal) GRPCStatus() *status.Status { return status.Convert(r.err) }

func refuse(reason string, code codes.Code, format string, args ...any) *refusal {
	return &refusal{reason: reason, err: status.Errorf(code, "xds: "+format, args...)}
}

// checkStreamType checks a request's type URL (typeURL, "" when it named none) against its
// stream's own type (streamType, "" for ADS).
func checkStreamType(typeURL, streamType string) *refusal {
	switch {
	case typeURL == "" && streamType == "":
		return refuse(refusedUnknownType, codes.InvalidArgument, "type_url is empty: an aggregated (ADS) stream must name the type of every request")
	case typeURL != "" && streamType != "" && typeURL != streamType:
		return refuse(refusedWrongType, codes.InvalidArgument, "type_url %s: this stream's service serves only %s",
			untrusted.Quote(typeURL, untrusted.MaxID), streamType)
	}
	return nil
}

// checkKnown checks that a request's type URL is empty or one of knownTypes.
func checkKnown(typeURL string) *refusal {
	if _, ok := knownTypes[typeURL]; ok || typeURL == "" {
		return nil
	}
	return refuse(refusedUnknownType, codes.InvalidArgument, "type_url %s: not a resource type of the xDS API v3 (this server serves %s)",
		untrusted.Quote(typeURL, untrusted.MaxID), strings.Join(servedTypes, ", "))
}

// checkNames checks the names of one field of a request (field names it in the status).
func checkNames(field string, names []string, max int) *refusal {
	if len(names) > max {
		return refuse(refusedNames, codes.ResourceExhausted, "%s: %d names, at most %d per type and stream (--xds-max-names)", field, len(names), max)
	}
	for _, n := range names {
		if len(n) > maxNameBytes {
			return refuse(refusedField, codes.InvalidArgument, "%s: name %s is %d bytes, at most %d",
				field, untrusted.Quote(n, untrusted.MaxID), len(n), maxNameBytes)
		}
	}
	return nil
}

// checkSotW checks a state-of-the-world request's fields that need no stream state.
func checkSotW(req *discoveryv3.DiscoveryRequest, l Limits) *refusal {
	if r := checkKnown(req.GetTypeUrl()); r != nil { // the stream's own type is checked with its state
		return r
	}
	if len(req.GetVersionInfo()) > maxVersionBytes {
		return refuse(refusedField, codes.InvalidArgument, "version_info is %d bytes, at most %d", len(req.GetVersionInfo()), maxVersionBytes)
	}
	return checkNames("resource_names", req.GetResourceNames(), l.MaxNames)
}

// checkDelta checks a delta request's fields that need no stream state.
func checkDelta(req *discoveryv3.DeltaDiscoveryRequest, l Limits) *refusal {
	if r := checkKnown(req.GetTypeUrl()); r != nil {
		return r
	}
	if r := checkNames("resource_names_subscribe", req.GetResourceNamesSubscribe(), l.MaxNames); r != nil {
		return r
	}
	if r := checkNames("resource_names_unsubscribe", req.GetResourceNamesUnsubscribe(), l.MaxNames); r != nil {
		return r
	}
	for n, v := range req.GetInitialResourceVersions() {
		if len(n) > maxNameBytes || len(v) > maxVersionBytes {
			return refuse(refusedField, codes.InvalidArgument, "initial_resource_versions: name %s or its version is too long (at most %d and %d bytes)",
				untrusted.Quote(n, untrusted.MaxID), maxNameBytes, maxVersionBytes)
		}
	}
	return nil
}

// subscriptionTooLarge is the refusal of a delta request after which the stream would
// subscribe to n names of typeURL.
func subscriptionTooLarge(typeURL string, n, max int) *refusal {
	return refuse(refusedNames, codes.ResourceExhausted, "resource_names_subscribe: the stream would subscribe to %d names of %s, at most %d per type and stream (--xds-max-names)",
		n, typeLabel(typeURL), max)
}

// describeClient names a client for status, Events and logs: by its certificate identity
// when mutual TLS gave it one, with its node id (escaped and shortened, see package
// untrusted) as secondary information; by its node id alone otherwise.
func describeClient(identity, nodeID string) string {
	node := untrusted.Quote(nodeID, untrusted.MaxID)
	if identity == "" {
		return "node " + node
	}
	return fmt.Sprintf("%s (node %s)", untrusted.Quote(identity, untrusted.MaxID), node)
}

// streamLabel names one stream of cl within untrusted.MaxID bytes (a replica report's
// field): its certificate identity, else its node id, escaped and shortened, then its
// stream ("sotw-3").
func streamLabel(cl ClientState) string {
	who := cl.NodeID
	if cl.Access.Identity != "" {
		who = cl.Access.Identity
	}
	return untrusted.Quote(who, untrusted.MaxID-len(cl.Stream)-1) + "/" + cl.Stream
}

// nodeField is a log field value for a node's id: escaped and shortened.
func nodeField(n *corev3.Node) string { return untrusted.Quote(n.GetId(), untrusted.MaxID) }
