package publish

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"text/template"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/xds"
)

// NoPositivePolicy says what to publish when no entry has a positive effective weight.
type NoPositivePolicy string

const (
	// ApplyCurrent publishes the all-zero weights as they are, as OME does.
	ApplyCurrent NoPositivePolicy = "ApplyCurrent"
	// RetainLastPositive keeps the last positive weights on the route.
	RetainLastPositive NoPositivePolicy = "RetainLastPositive"
)

// DefaultFieldManager is the field manager of every write the publisher makes.
const DefaultFieldManager = model.DefaultFieldManager

// DefaultXDSReconnectGrace is the CLI's --xds-reconnect-grace. gRPC clients reconnect with
// exponential backoff (initial 1s, multiplier 1.6, jitter 20%, at most 120s; gRPC's
// connection-backoff spec); after a publisher outage of up to about 20s a client's next
// attempt comes within about 13s (10.5s·1.2), and 20s also covers one more step for a slow
// dial. Outages longer than that push clients further out: raise the flag to match.
const DefaultXDSReconnectGrace = 20 * time.Second

// DefaultXDSPeerGrace is the CLI's --xds-peer-grace: how long the leader still counts a
// replica whose report expired while it had clients (see lease.Board). A frozen replica
// cannot fence itself, so its clients keep what it served until their HTTP/2 keepalive
// gives up on it: 30s covers a gRPC client with keepalive time 10s (the least the
// publisher's server permits) and timeout 20s (gRPC's default), and an Envoy whose xds
// cluster sets connection_keepalive within the same sum.
const DefaultXDSPeerGrace = 30 * time.Second

// DefaultXDSDepartedGrace is the CLI's --xds-departed-grace (xds.DefaultDepartedGrace, see
// there for why).
const DefaultXDSDepartedGrace = xds.DefaultDepartedGrace

// The CLI's --xds-max-names, --xds-max-request-bytes, --xds-max-streams-per-connection and
// --xds-max-connections-per-client: xds.Limits' defaults (see there for why).
const (
	DefaultXDSMaxNames                = xds.DefaultMaxNames
	DefaultXDSMaxRequestBytes         = xds.DefaultMaxRequestBytes
	DefaultXDSMaxStreamsPerConnection = xds.DefaultMaxStreamsPerConnection
	DefaultXDSMaxConnectionsPerClient = xds.DefaultMaxConnectionsPerClient
)

// Config is the publisher's configuration. The zero value of an optional field selects its
// documented default; Validate reports what is wrong with the rest.
type Config struct {
	// Namespaces to watch; empty means all namespaces.
	Namespaces []string
	// Gateway is the parent Gateway of every route (required). An empty Namespace means the
	// TrafficMap's namespace.
	Gateway types.NamespacedName
	// GatewaySection is the optional listener (sectionName) on the Gateway.
	GatewaySection string
	// HostTemplate is a Go text/template over {{.Namespace}} and {{.Service}} used when the
	// InferenceService has no ome.io/global-host annotation.
	HostTemplate string
	// RewriteHostname adds a per-backend URLRewrite filter setting Host to the endpoint host.
	RewriteHostname bool
	// BackendKind is the kind of each cluster's backend object behind the route
	// (httproute.BackendKinds); default httproute.BackendAuto, chosen by the parent
	// Gateway's GatewayClass controllerName.
	BackendKind httproute.BackendKind
	// RouteSettle is how long after a route write the gateway's acceptance still waits, for
	// controllers that write route status before their proxy serves the route
	// (httproute.SinkConfig.Settle): 0 (the default) takes each controller's from
	// httproute.ControllerSettles, a negative value holds none.
	RouteSettle time.Duration
	// ResolveInterval is how often an endpoint hostname of the endpointslice kind is
	// re-resolved when its lookup gives no TTL (default 30s); a TTL is used within
	// ResolveMinTTL (default 5s) and ResolveMaxTTL (default 5m).
	ResolveInterval, ResolveMinTTL, ResolveMaxTTL time.Duration
	// RequireRouteAccepted makes Published wait for the Gateway's Accepted and ResolvedRefs.
	RequireRouteAccepted bool
	// NoPositivePolicy applies when every effective weight is zero; default ApplyCurrent.
	NoPositivePolicy NoPositivePolicy
	// FieldManager names the publisher's writes; default model.FieldManagerFor the
	// publisher's name: DefaultFieldManager for the default name, so that managedFields
	// tell two publishers apart.
	FieldManager string
	// Workers is the number of concurrent reconciles; default 2.
	Workers int
	// ResyncPeriod re-reconciles every TrafficMap this often to repair drift; default 10m.
	ResyncPeriod time.Duration
	// TaintSourcePeriod is how often the publisher checks discovery for a taint source API
	// (InferenceCluster, WorkloadCluster) served or removed since it started; default
	// DefaultTaintSourcePeriod. It also checks at once when a map's live taints show a
	// source it does not watch.
	TaintSourcePeriod time.Duration
	// QPS and Burst bound the API client; defaults 50 and 100.
	QPS   float32
	Burst int

	// Sinks selects where weights are published: SinkHTTPRoute, SinkXDS or both. Empty
	// means the HTTPRoute sink alone.
	Sinks []string
	// XDSAddress is where the xDS server listens (default ":18000").
	XDSAddress string
	// XDSListenerAddress is the Envoy listener's host:port (default "0.0.0.0:10080").
	XDSListenerAddress string
	// XDSTLSCert, XDSTLSKey and XDSClientCA secure the xDS port (all optional; the CA turns
	// on mutual TLS). Without the CA every xDS client is anonymous and every client counts
	// for Published; with it only clients with a certificate it signed connect.
	XDSTLSCert, XDSTLSKey, XDSClientCA string
	// XDSClientNamespaces are rules "IDENTITY=NAMESPACE[,NAMESPACE...]" saying which client
	// certificate identities see (and count for) which namespaces' maps (see
	// xds.ClientPolicy); they need XDSClientCA. Empty: every authenticated client sees all.
	XDSClientNamespaces []string
	// RequireXDSAck makes Published wait until every relevant xDS client (a stream subscribed to the
	// map's resources) has ACKed a version carrying the map's current weights.
	RequireXDSAck bool
	// XDSMinClients makes Published wait until at least this many xDS clients are connected.
	XDSMinClients int
	// XDSMaxNames, XDSMaxRequestBytes, XDSMaxStreamsPerConnection and
	// XDSMaxConnectionsPerClient bound what one xDS client may make the server hold
	// (xds.Limits); 0: the default (xds.DefaultMaxNames, xds.DefaultMaxRequestBytes,
	// xds.DefaultMaxStreamsPerConnection, xds.DefaultMaxConnectionsPerClient).
	XDSMaxNames, XDSMaxRequestBytes, XDSMaxStreamsPerConnection, XDSMaxConnectionsPerClient int
	// XDSReconnectGrace is how long after the xDS server starts, and after this replica
	// becomes leader, a map whose content was not published before (see
	// model.Standing.PublishedBefore) stays Published False, so clients of the previous publisher
	// that are still reconnecting ACK it first. 0: no grace (the CLI default is
	// DefaultXDSReconnectGrace).
	XDSReconnectGrace time.Duration
	// XDSPeerGrace is how long, with leader election, the leader still counts another
	// replica whose report expired while it had clients, judging by its last report (a
	// frozen replica's clients keep what it served until their keepalive gives up). 0:
	// none (the CLI default is DefaultXDSPeerGrace).
	XDSPeerGrace time.Duration
	// XDSDepartedGrace is how long an xDS client stream that went away (closed, keepalive,
	// reset) still holds a map whose current content it had not ACKed Published False, as
	// if connected (xds.Departed); past it the map may be Published, its message naming
	// the departed client. 0: none (the CLI default is DefaultXDSDepartedGrace).
	XDSDepartedGrace time.Duration
	// Registerer, when set, receives the publisher's metrics (HTTPAddress serves its own
	// registry otherwise).
	Registerer prometheus.Registerer
	// HTTPAddress, when set, serves /metrics, /healthz, /readyz and, without DebugAddress,
	// the debug endpoints (/debug/xds, /debug/replicas, /debug/pprof/).
	HTTPAddress string
	// DebugAddress, when set, serves the debug endpoints instead of HTTPAddress, e.g. on
	// loopback ("127.0.0.1:8081") so that no Service exposes them.
	DebugAddress string
	// LeaderElection lets several replicas run: only the Lease holder writes.
	LeaderElection LeaderElection
	// EnablePprof serves Go's profiles under /debug/pprof/ (on DebugAddress when set, else
	// on HTTPAddress).
	EnablePprof bool
	// PublisherName is status.publisher.publisherName of the claim journals this publisher
	// writes and honours; default the FieldManager.
	PublisherName string
	// TakeOverFrom is the publisherName of another publisher whose maps this one takes
	// over (--take-over-from): a map whose claim journal names it is handed over (this
	// publisher's journal replaces it) and published as its own. With "gatewayapi" (OME's
	// built-in publisher) the HTTPRoute sink also adopts the route OME wrote for the map
	// and removes OME's backend Services once the route no longer refers to them. A map
	// another publisher holds is otherwise left to it (Published False, PublisherChanged,
	// while that publisher is silent).
	TakeOverFrom string
	// TeardownTimeout bounds each wait of a deleted map's ordered teardown (teardown.go):
	// for its weights 0 to be confirmed, then for its xDS removal to be ACKed; after it the
	// teardown goes on (logged, Warning Event TeardownTimedOut). Default
	// DefaultTeardownTimeout.
	TeardownTimeout time.Duration
	// ClaimNamespace is where the publisher keeps its claim records (claims.go), a namespace
	// where tenants cannot write ConfigMaps: the publisher's own (--claim-namespace, default
	// $POD_NAMESPACE). Default LeaderElection.Namespace, else "default".
	ClaimNamespace string
	// KnownPublishers are the publisherNames of other publishers that may hold maps
	// (--known-publishers), besides TakeOverFrom and OME's "gatewayapi": a claim journal
	// naming any other publisher is a forgery or a mistake, and counts for no one.
	KnownPublishers []string
	// HostnameEntitlements is the optional entitlement policy (model.ClaimPolicy): each rule gives
	// a domain to a list of namespaces. None: any namespace may claim any name that is not
	// another namespace's gRPC-form name.
	HostnameEntitlements []model.Entitlement
}

// adoptsFromOME reports whether the HTTPRoute sink adopts what OME's publisher wrote
// (--take-over-from gatewayapi).
func (c Config) adoptsFromOME() bool {
	return c.TakeOverFrom == model.OMEPublisherName && c.sinkOn(SinkHTTPRoute)
}

// publisherName is PublisherName or its default.
func (c Config) publisherName() string {
	switch {
	case c.PublisherName != "":
		return c.PublisherName
	case c.FieldManager != "":
		return c.FieldManager
	}
	return DefaultFieldManager
}

// publishers are the publisher names this publisher knows (model.Publishers).
func (c Config) publishers() model.Publishers {
	return model.Publishers{Self: c.publisherName(), TakeOverFrom: c.TakeOverFrom, Known: c.KnownPublishers}
}

// claimPolicy is the policy of who may claim which hostname.
func (c Config) claimPolicy() model.ClaimPolicy {
	return model.ClaimPolicy{Entitlements: c.HostnameEntitlements, GRPCNames: c.sinkOn(SinkXDS)}
}

// optionsDigest is status.publisher.observedOptionsDigest: the digest of the options that
// shape how a map is published (its names, where and how its weights go).
func (c Config) optionsDigest() string {
	opts := []string{
		"publisherName=" + c.publisherName(),
		"gateway=" + c.Gateway.String(),
		"gatewaySection=" + c.GatewaySection,
		"hostTemplate=" + c.HostTemplate,
		fmt.Sprintf("rewriteHostname=%t", c.RewriteHostname),
		"noPositivePolicy=" + string(c.NoPositivePolicy),
		"sinks=" + strings.Join(slices.Sorted(slices.Values(c.Sinks)), ","),
	}
	for _, e := range c.HostnameEntitlements {
		opts = append(opts, "hostnameEntitlement="+e.String())
	}
	if c.BackendKind != "" && c.BackendKind != httproute.BackendAuto {
		opts = append(opts, "backendKind="+string(c.BackendKind)) // absent for the default: digests of older versions stay
	}
	return model.OptionsDigest(opts)
}

// The sinks.
const (
	SinkHTTPRoute = "httproute"
	SinkXDS       = "xds"
)

// sinkOn reports whether the sink is selected.
func (c Config) sinkOn(sink string) bool {
	if len(c.Sinks) == 0 {
		return sink == SinkHTTPRoute
	}
	return slices.Contains(c.Sinks, sink)
}

// ErrInvalidConfig marks a configuration the publisher cannot start with.
var ErrInvalidConfig = errors.New("invalid configuration")

func (c *Config) setDefaults() {
	if c.NoPositivePolicy == "" {
		c.NoPositivePolicy = ApplyCurrent
	}
	if c.BackendKind == "" {
		c.BackendKind = httproute.BackendAuto
	}
	setDuration(&c.ResolveInterval, 30*time.Second)
	setDuration(&c.ResolveMinTTL, 5*time.Second)
	setDuration(&c.ResolveMaxTTL, 5*time.Minute)
	if c.FieldManager == "" {
		c.FieldManager = model.FieldManagerFor(c.publisherName())
	}
	if c.Workers <= 0 {
		c.Workers = 2
	}
	if c.ResyncPeriod <= 0 {
		c.ResyncPeriod = 10 * time.Minute
	}
	if c.TaintSourcePeriod <= 0 {
		c.TaintSourcePeriod = DefaultTaintSourcePeriod
	}
	if c.QPS <= 0 {
		c.QPS = 50
	}
	if c.Burst <= 0 {
		c.Burst = 100
	}
	if c.XDSAddress == "" {
		c.XDSAddress = ":18000"
	}
	if c.TeardownTimeout <= 0 {
		c.TeardownTimeout = DefaultTeardownTimeout
	}
	if c.LeaderElection.Enabled {
		c.LeaderElection.setDefaults()
	}
	if c.ClaimNamespace == "" {
		c.ClaimNamespace = c.LeaderElection.Namespace
	}
	if c.ClaimNamespace == "" {
		c.ClaimNamespace = "default"
	}
}

// Validate reports every problem with c, each naming the flag and the rule.
func (c Config) Validate() error {
	errs := c.validateBackends()
	switch {
	case !c.sinkOn(SinkHTTPRoute): // --gateway only matters to the HTTPRoute sink
	case c.Gateway.Name == "":
		errs = append(errs, fmt.Errorf("%w: --gateway is required (NAMESPACE/NAME or NAME)", ErrInvalidConfig))
	default:
		if msgs := validation.IsDNS1123Subdomain(c.Gateway.Name); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%w: --gateway name %q: %s", ErrInvalidConfig, c.Gateway.Name, msgs[0]))
		}
	}
	if c.Gateway.Namespace != "" {
		if msgs := validation.IsDNS1123Label(c.Gateway.Namespace); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%w: --gateway namespace %q: %s", ErrInvalidConfig, c.Gateway.Namespace, msgs[0]))
		}
	}
	if c.GatewaySection != "" {
		if msgs := validation.IsDNS1123Subdomain(c.GatewaySection); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%w: --gateway-section %q: %s", ErrInvalidConfig, c.GatewaySection, msgs[0]))
		}
	}
	errs = append(errs, c.validateNames()...)
	for _, e := range c.HostnameEntitlements {
		if _, err := model.ParseEntitlement(e.String()); err != nil {
			errs = append(errs, fmt.Errorf("%w: --hostname-entitlement: %w", ErrInvalidConfig, err))
		}
	}
	switch c.NoPositivePolicy {
	case "", ApplyCurrent, RetainLastPositive:
	default:
		errs = append(errs, fmt.Errorf("%w: --no-positive-policy %q: must be ApplyCurrent or RetainLastPositive", ErrInvalidConfig, c.NoPositivePolicy))
	}
	if _, err := c.hostTemplate(); err != nil {
		errs = append(errs, err)
	}
	for _, sink := range c.Sinks {
		if sink != SinkHTTPRoute && sink != SinkXDS {
			errs = append(errs, fmt.Errorf("%w: --sinks %q: must be httproute, xds or both (comma-separated)", ErrInvalidConfig, sink))
		}
	}
	if le := c.LeaderElection; le.Enabled {
		if msgs := validation.IsDNS1123Label(le.Namespace); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%w: --leader-election-namespace %q: %s", ErrInvalidConfig, le.Namespace, msgs[0]))
		}
		if le.LeaseDuration != 0 && le.RenewDeadline != 0 && le.LeaseDuration <= le.RenewDeadline {
			errs = append(errs, fmt.Errorf("%w: --leader-election-lease-duration must be longer than --leader-election-renew-deadline", ErrInvalidConfig))
		}
	}
	if c.XDSReconnectGrace < 0 {
		errs = append(errs, fmt.Errorf("%w: --xds-reconnect-grace %s: must not be negative", ErrInvalidConfig, c.XDSReconnectGrace))
	}
	if c.XDSDepartedGrace < 0 {
		errs = append(errs, fmt.Errorf("%w: --xds-departed-grace %s: must not be negative", ErrInvalidConfig, c.XDSDepartedGrace))
	}
	if c.XDSPeerGrace < 0 {
		errs = append(errs, fmt.Errorf("%w: --xds-peer-grace %s: must not be negative", ErrInvalidConfig, c.XDSPeerGrace))
	}
	if c.TeardownTimeout < 0 {
		errs = append(errs, fmt.Errorf("%w: --teardown-timeout %s: must not be negative", ErrInvalidConfig, c.TeardownTimeout))
	}
	if c.XDSMinClients < 0 {
		errs = append(errs, fmt.Errorf("%w: --xds-min-clients %d: must not be negative", ErrInvalidConfig, c.XDSMinClients))
	}
	if c.ClaimNamespace != "" {
		if msgs := validation.IsDNS1123Label(c.ClaimNamespace); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%w: --claim-namespace %q: %s", ErrInvalidConfig, c.ClaimNamespace, msgs[0]))
		}
	}
	errs = append(errs, c.validateXDSLimits()...)
	for _, ns := range c.Namespaces {
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%w: --namespace %q: %s", ErrInvalidConfig, ns, msgs[0]))
		}
	}
	return errors.Join(errs...)
}

// validateNames checks --publisher-name and --take-over-from.
func (c Config) validateNames() []error {
	var errs []error
	if n := len(c.PublisherName); n > 128 {
		errs = append(errs, fmt.Errorf("%w: --publisher-name is %d bytes: at most 128 (status.publisher.publisherName)", ErrInvalidConfig, n))
	}
	if n := len(c.TakeOverFrom); n > 128 {
		errs = append(errs, fmt.Errorf("%w: --take-over-from is %d bytes: at most 128 (status.publisher.publisherName)", ErrInvalidConfig, n))
	}
	for _, k := range c.KnownPublishers {
		if k == "" || len(k) > 128 {
			errs = append(errs, fmt.Errorf("%w: --known-publishers %q: each name is 1 to 128 bytes (status.publisher.publisherName)", ErrInvalidConfig, k))
		}
	}
	if c.TakeOverFrom != "" && c.TakeOverFrom == c.publisherName() {
		errs = append(errs, fmt.Errorf("%w: --take-over-from %q is this publisher's own name (--publisher-name): name the publisher to take maps over from", ErrInvalidConfig, c.TakeOverFrom))
	}
	return errs
}

func (c Config) hostTemplate() (*template.Template, error) {
	if c.HostTemplate == "" {
		return nil, nil
	}
	t, err := template.New("host").Option("missingkey=error").Parse(c.HostTemplate)
	if err != nil {
		return nil, fmt.Errorf("%w: --host-template: %w", ErrInvalidConfig, err)
	}
	return t, nil
}

// validateXDSLimits checks the xDS server's limits: each 0 (the default) or positive, and
// within what HTTP/2 settings carry.
func (c Config) validateXDSLimits() []error {
	var errs []error
	for _, l := range []struct {
		flag string
		v    int
	}{{"--xds-max-names", c.XDSMaxNames}, {"--xds-max-request-bytes", c.XDSMaxRequestBytes}, {"--xds-max-streams-per-connection", c.XDSMaxStreamsPerConnection},
		{"--xds-max-connections-per-client", c.XDSMaxConnectionsPerClient}} {
		if l.v < 0 || l.v > math.MaxInt32 {
			errs = append(errs, fmt.Errorf("%w: %s %d: must be positive (0: the default)", ErrInvalidConfig, l.flag, l.v))
		}
	}
	return errs
}

// setDuration sets *d to def when it is not positive.
func setDuration(d *time.Duration, def time.Duration) {
	if *d <= 0 {
		*d = def
	}
}

// validateBackends checks the backend kind options.
func (c Config) validateBackends() []error {
	var errs []error
	if c.BackendKind != "" {
		if _, err := httproute.ParseBackendKind(string(c.BackendKind)); err != nil {
			errs = append(errs, fmt.Errorf("%w: --backend-kind: %w", ErrInvalidConfig, err))
		}
	}
	if c.ResolveMinTTL > 0 && c.ResolveMaxTTL > 0 && c.ResolveMinTTL > c.ResolveMaxTTL {
		errs = append(errs, fmt.Errorf("%w: --resolve-min-ttl %s is above --resolve-max-ttl %s", ErrInvalidConfig, c.ResolveMinTTL, c.ResolveMaxTTL))
	}
	return errs
}
