package model

// The /debug/xds document of the xDS sink: its JSON wire types, read by the operator
// commands (report) and served by package xds. Resource types are named by their message
// name ("Listener", "RouteConfiguration", "Cluster").

// Flavour is the kind of xDS client a node is, which decides the resources it gets.
type Flavour string

// Flavours.
const (
	FlavourEnvoy Flavour = "envoy"
	FlavourGRPC  Flavour = "grpc"
)

// XDSNack is a client's rejection of one version.
type XDSNack struct {
	Version string
	Message string
}

// XDSDebugState is the JSON document the xDS server serves at /debug/xds (xds.DebugHandler). Resource types are named by their
// message name ("Listener", "RouteConfiguration", "Cluster").
type XDSDebugState struct {
	// Snapshots is the version served to each flavour that has a snapshot, per resource type.
	Snapshots map[Flavour]map[string]string `json:"snapshots"`
	// Clients are the connected clients (one per stream) that identified themselves, sorted
	// by node id, then stream.
	Clients []XDSDebugClient `json:"clients"`
	// Maps, when the handler has a source for them, are the served maps sorted by key, each
	// with the clients relevant to it and those that ACKed its current content.
	Maps []XDSDebugMap `json:"maps,omitempty"`
}

// XDSDebugClient is one connected client in XDSDebugState.
type XDSDebugClient struct {
	NodeID  string  `json:"nodeID"`
	Flavour Flavour `json:"flavour"`
	// Stream names the stream ("sotw-3", "delta-1"); Peer is its remote address.
	Stream string `json:"stream,omitempty"`
	Peer   string `json:"peer,omitempty"`
	// Identity is the client certificate's identity (mutual TLS); Namespaces, when the
	// client policy restricts it, the namespace patterns it sees.
	Identity   string   `json:"identity,omitempty"`
	Namespaces []string `json:"namespaces,omitempty"`
	// Type is the stream's one resource type for per-type xDS, empty for ADS.
	Type string `json:"type,omitempty"`
	// Acked is the last version the client ACKed, per resource type.
	Acked map[string]string `json:"acked"`
	// XDSNacked is the client's last NACK per resource type, cleared by a later ACK of that type
	// (a delta stream's only once no resource of the type stays rejected).
	Nacked map[string]XDSNack `json:"nacked,omitempty"`
	// Subscribed is what the stream subscribed to, per resource type.
	Subscribed map[string]XDSDebugSubscription `json:"subscribed,omitempty"`
}

// XDSDebugSubscription is one type's subscription in XDSDebugClient.
type XDSDebugSubscription struct {
	Wildcard bool     `json:"wildcard,omitempty"`
	Names    []string `json:"names,omitempty"`
}

// XDSDebugMap is one map's xDS confirmation in XDSDebugState: the clients (by the xDS tracker's client id)
// relevant to it, and those of them that ACKed its current content, both sorted.
type XDSDebugMap struct {
	Key      string   `json:"key"`
	Relevant []string `json:"relevant"`
	Acked    []string `json:"acked"`
}
