// Package cli is the command tree of the publisher binary (cmd/publisher): 'publisher run'
// and the operator commands. It lives outside package main so that tools such as
// hack/docgen can build the same tree and read its flag sets.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/trafficmap/publisher/drain"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/publish"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// The names the binary answers to: as itself, as a kubectl plugin (kubectl finds
// kubectl-trafficmap on PATH and runs it for 'kubectl trafficmap'), and as the plugin's
// completion helper (kubectl runs kubectl_complete-trafficmap to complete 'kubectl
// trafficmap ...').
const (
	programName           = "publisher"
	pluginProgram         = "kubectl-trafficmap"
	pluginCompleteProgram = "kubectl_complete-trafficmap"
)

const rootLong = `publisher publishes OME TrafficMaps as Gateway API HTTPRoute weights and over xDS,
and gives operators the guarded drain and undrain actions and a status view.

The operator commands (drain, undrain, taint, untaint, status) take kubectl's connection flags
(--kubeconfig, --context, -n, --as, --as-group, --request-timeout, ...). Linked or installed
as kubectl-trafficmap on PATH, the binary is a kubectl plugin: 'kubectl trafficmap status ...'.`

// exitError ends a command with an exit code; err, when set, is printed as "error: <err>".
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// exit returns an exitError with code for err.
func exit(code int, err error) error { return &exitError{code: code, err: err} }

// runMain runs the command line args as the program "publisher" and returns the process
// exit code.
func runMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return RunProgram(ctx, programName, args, stdout, stderr)
}

// RunProgram runs args as program (the base name of argv[0]) and returns the process exit
// code: "kubectl-trafficmap" shows itself as "kubectl trafficmap",
// "kubectl_complete-trafficmap" answers kubectl's completion requests; any other name is
// the publisher.
func RunProgram(ctx context.Context, program string, args []string, stdout, stderr io.Writer) int {
	if program == pluginCompleteProgram {
		args = append([]string{cobra.ShellCompRequestCmd}, args...)
	}
	root := NewRootCommand(program, stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	if ee, ok := errors.AsType[*exitError](err); ok {
		if ee.err != nil {
			fmt.Fprintf(stderr, "error: %v\n", ee.err)
		}
		return ee.code
	}
	// cobra's own refusals: an unknown command or a flag of the root.
	fmt.Fprintf(stderr, "error: %v\nRun '%s --help' for usage.\n", err, root.DisplayName())
	return exitUsage
}

// NewRootCommand returns the command tree of program (the base name of argv[0], as for
// RunProgram), writing to stdout and stderr. Building it has no side effects; only
// executing a command does anything.
func NewRootCommand(program string, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           programName,
		Short:         "Publish OME TrafficMaps as HTTPRoute and xDS weights; drain, undrain and inspect them",
		Long:          rootLong,
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprint(stderr, cmd.UsageString())
			return exit(exitUsage, nil)
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return exit(exitUsage, err) })
	root.AddCommand(newRunCommand(stderr), newActionCommand(drain.ActionDrain, stdout, stderr),
		newActionCommand(drain.ActionUndrain, stdout, stderr), newTaintCommand(drain.ActionTaint, stdout, stderr),
		newTaintCommand(drain.ActionUntaint, stdout, stderr), newStatusCommand(stdout), newReleaseCommand(stdout))
	if program == pluginProgram || program == pluginCompleteProgram {
		root.Use = pluginProgram
		root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl trafficmap"}
		for _, c := range root.Commands() {
			c.Example = strings.ReplaceAll(c.Example, programName+" ", "kubectl trafficmap ")
		}
	}
	return root
}

// runFlags are the flags of 'publisher run'.
type runFlags struct {
	kubeconfig, context                string
	namespaces                         string
	gateway, section                   string
	hostTemplate                       string
	rewriteHostname                    bool
	backendKind                        string
	routeSettle                        settleFlag
	resolveInterval                    time.Duration
	resolveMinTTL, resolveMaxTTL       time.Duration
	requireRouteAccepted               bool
	noPositivePolicy                   string
	workers                            int
	resync                             time.Duration
	qps                                float64
	burst                              int
	logFormat, logLevel                string
	sinks                              string
	xdsAddress                         string
	xdsListenerAddress                 string
	xdsTLSCert, xdsTLSKey, xdsClientCA string
	xdsClientNamespaces                []string
	requireXDSAck                      bool
	xdsMinClients                      int
	xdsMaxNames, xdsMaxStreamsPerConn  int
	xdsMaxRequestBytes                 int
	xdsMaxConnsPerClient               int
	xdsReconnectGrace                  time.Duration
	xdsPeerGrace                       time.Duration
	xdsDepartedGrace                   time.Duration
	httpAddress                        string
	debugAddress                       string
	leaderElect                        bool
	leaseNamespace                     string
	claimNamespace                     string
	knownPublishers                    []string
	leaseName                          string
	leaseIdentity                      string
	leaseDuration                      time.Duration
	renewDeadline                      time.Duration
	retryPeriod                        time.Duration
	pprof                              bool
	publisherName                      string
	takeOverFrom                       string
	hostnameEntitlements               []string
	teardownTimeout                    time.Duration
	memoryLimitRatio                   float64
}

// register adds the flags of 'publisher run' to fs.
func (f *runFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "path to a kubeconfig; default: in-cluster config, then $KUBECONFIG or ~/.kube/config")
	fs.StringVar(&f.context, "context", "", "kubeconfig context to use")
	fs.StringVar(&f.namespaces, "namespace", "", "comma-separated namespaces to watch; empty watches all namespaces")
	fs.StringVar(&f.gateway, "gateway", "", "parent Gateway of every HTTPRoute, NAMESPACE/NAME or NAME (NAME means the TrafficMap's namespace); required")
	fs.StringVar(&f.section, "gateway-section", "", "listener name (parentRef sectionName) on the Gateway")
	fs.StringVar(&f.hostTemplate, "host-template", "", "Go template for the route hostname when the InferenceService has no ome.io/global-host annotation, over {{.Namespace}} and {{.Service}}, e.g. '{{.Service}}.{{.Namespace}}.example.com'")
	fs.BoolVar(&f.rewriteHostname, "rewrite-hostname", false, "add a per-backend URLRewrite filter that sets Host to the cluster endpoint's host")
	fs.StringVar(&f.backendKind, "backend-kind", string(httproute.BackendAuto), "what each cluster's backendRef points at: auto (chosen by the Gateway's GatewayClass controllerName), service-externalname, endpointslice (a selector-less Service with EndpointSlices of the resolved endpoint addresses) or envoy-gateway-backend (Envoy Gateway's Backend)")
	fs.Var(&f.routeSettle, "route-settle", "how long after a route write the Gateway's acceptance still waits before Published counts it: auto (per controller: 3s for Traefik, which writes route status before its proxy serves the route; none for the others) or a duration (0s: none)")
	fs.DurationVar(&f.resolveInterval, "resolve-interval", 30*time.Second, "endpointslice backends: re-resolve an endpoint hostname this often when its lookup gives no TTL")
	fs.DurationVar(&f.resolveMinTTL, "resolve-min-ttl", 5*time.Second, "endpointslice backends: the shortest re-resolve period (floor on a record's TTL)")
	fs.DurationVar(&f.resolveMaxTTL, "resolve-max-ttl", 5*time.Minute, "endpointslice backends: the longest re-resolve period (ceiling on a record's TTL)")
	fs.BoolVar(&f.requireRouteAccepted, "require-route-accepted", true, "Published waits for the Gateway to report Accepted and ResolvedRefs at the route's generation")
	fs.StringVar(&f.noPositivePolicy, "no-positive-policy", string(publish.ApplyCurrent), "when every effective weight is 0: ApplyCurrent publishes the zeros, RetainLastPositive keeps the last positive weights")
	fs.IntVar(&f.workers, "workers", 2, "concurrent reconciles")
	fs.DurationVar(&f.resync, "resync", 10*time.Minute, "re-reconcile every TrafficMap this often to repair drift")
	fs.Float64Var(&f.qps, "kube-api-qps", 50, "API client queries per second")
	fs.IntVar(&f.burst, "kube-api-burst", 100, "API client burst")
	fs.StringVar(&f.logFormat, "log-format", "json", "log format: json or console")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&f.sinks, "sinks", "httproute,xds", "where to publish: httproute, xds, or both (comma-separated); xds alone needs no Gateway API CRDs")
	fs.StringVar(&f.xdsAddress, "xds-address", ":18000", "address of the xDS server (ADS and per-type, state of the world and delta)")
	fs.StringVar(&f.xdsListenerAddress, "xds-listener-address", "0.0.0.0:10080", "host:port of the listener the xDS server gives Envoy")
	fs.StringVar(&f.xdsTLSCert, "xds-tls-cert", "", "PEM certificate for TLS on the xDS port (with --xds-tls-key)")
	fs.StringVar(&f.xdsTLSKey, "xds-tls-key", "", "PEM key for TLS on the xDS port")
	fs.StringVar(&f.xdsClientCA, "xds-client-ca", "", "PEM CA bundle: require xDS clients to present a certificate it signed (mutual TLS); only such clients can read resources and count for Published. Without it every client that reaches the port counts")
	fs.StringArrayVar(&f.xdsClientNamespaces, "xds-client-namespaces", nil, "IDENTITY=NAMESPACE[,NAMESPACE...] (repeatable; needs --xds-client-ca): xDS clients whose certificate has a URI SAN, DNS SAN or common name matching IDENTITY see, and count for, only the maps of these namespaces; '*' matches any run of characters; a client matching no rule is refused. None: every authenticated client sees every namespace")
	fs.BoolVar(&f.requireXDSAck, "require-xds-ack", true, "Published waits until every relevant xDS client (one subscribed to the map's resources) has ACKed a version with the map's current weights")
	fs.IntVar(&f.xdsMinClients, "xds-min-clients", 0, "Published waits until at least this many xDS clients are connected")
	fs.IntVar(&f.xdsMaxNames, "xds-max-names", publish.DefaultXDSMaxNames, "most resource names one xDS stream may subscribe to per resource type (a state-of-the-world request's names, a delta stream's subscription); a request beyond it ends its stream with RESOURCE_EXHAUSTED naming the field")
	fs.IntVar(&f.xdsMaxRequestBytes, "xds-max-request-bytes", publish.DefaultXDSMaxRequestBytes, "largest xDS request accepted, in bytes; a larger one ends its stream with RESOURCE_EXHAUSTED. A delta Envoy reconnecting declares every resource it holds (about 50 to 80 bytes a cluster): raise it for fleets above about 25,000 maps of 8 clusters")
	fs.IntVar(&f.xdsMaxStreamsPerConn, "xds-max-streams-per-connection", publish.DefaultXDSMaxStreamsPerConnection, "most concurrent xDS streams on one connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS): a client queues further streams until one ends")
	fs.IntVar(&f.xdsMaxConnsPerClient, "xds-max-connections-per-client", publish.DefaultXDSMaxConnectionsPerClient, "most connections with open xDS streams per client: its certificate identity with --xds-client-ca, else its IP address; a stream on a further connection is refused with RESOURCE_EXHAUSTED")
	fs.DurationVar(&f.xdsPeerGrace, "xds-peer-grace", publish.DefaultXDSPeerGrace, "with leader election, how long the leader still counts a replica whose report expired while it had xDS clients (a frozen replica cannot close their connections; they keep what it served until their keepalive gives up): set it above your clients' keepalive time plus timeout; 0 stops counting at expiry")
	fs.DurationVar(&f.xdsDepartedGrace, "xds-departed-grace", publish.DefaultXDSDepartedGrace, "how long an xDS client stream that went away (closed, keepalive timeout, reset) without ACKing a map's current weights still holds the map Published False, as it may still route by what it held; past it the map may go True, its message naming the departed client; set it above your clients' keepalive time plus timeout and reconnect backoff; 0 turns it off")
	fs.DurationVar(&f.xdsReconnectGrace, "xds-reconnect-grace", publish.DefaultXDSReconnectGrace, "after the xDS server starts and after becoming leader, a map whose weights were not published before waits this long (and for every relevant client's ACK) before Published is True, so clients still reconnecting with gRPC's backoff count; 0 turns it off")
	fs.StringVar(&f.httpAddress, "http-address", ":8080", "address serving /metrics, /healthz, /readyz (and /debug/xds, /debug/replicas without --debug-address); empty turns it off")
	fs.StringVar(&f.debugAddress, "debug-address", "", "address serving /debug/xds, /debug/replicas and /debug/pprof/ instead of --http-address, e.g. 127.0.0.1:8081 so no Service exposes them")
	fs.BoolVar(&f.leaderElect, "leader-elect", false, "let several replicas run: only the holder of a Lease writes routes, Services and status; every replica serves xDS")
	fs.StringVar(&f.leaseNamespace, "leader-election-namespace", os.Getenv("POD_NAMESPACE"), "namespace of the Lease (default $POD_NAMESPACE)")
	fs.StringVar(&f.leaseName, "leader-election-id", "trafficmap-publisher", "name of the Lease")
	fs.StringVar(&f.leaseIdentity, "leader-election-identity", os.Getenv("POD_NAME"), "this replica's identity in the election and in its xDS report (default $POD_NAME, else the hostname and a random suffix)")
	fs.DurationVar(&f.leaseDuration, "leader-election-lease-duration", 15*time.Second, "how long a Lease lasts without renewal")
	fs.DurationVar(&f.renewDeadline, "leader-election-renew-deadline", 10*time.Second, "how long the leader keeps trying to renew before it gives up")
	fs.DurationVar(&f.retryPeriod, "leader-election-retry-period", 2*time.Second, "how often candidates try to acquire or renew the Lease")
	fs.BoolVar(&f.pprof, "pprof", false, "serve Go's profiles under /debug/pprof/ (on --debug-address when set, else --http-address)")
	fs.StringVar(&f.publisherName, "publisher-name", "", "status.publisher.publisherName of the claim journals this publisher writes and honours (default "+publish.DefaultFieldManager+"); another name also names its field manager "+publish.DefaultFieldManager+"/NAME")
	fs.StringVar(&f.claimNamespace, "claim-namespace", os.Getenv("POD_NAMESPACE"), "namespace of the claim records (ConfigMaps recording which hostnames were granted to which TrafficMap): the publisher's own, where tenants cannot write (default $POD_NAMESPACE, else the Lease's namespace, else default)")
	fs.StringSliceVar(&f.knownPublishers, "known-publishers", nil, "comma-separated publisherNames of other publishers that may hold TrafficMaps (besides --take-over-from and gatewayapi); a claim journal naming any other publisher is ignored and reported")
	fs.StringVar(&f.takeOverFrom, "take-over-from", "", "publisherName of another publisher whose maps this one takes over: a map whose claim journal names it is handed over and published (gatewayapi: OME's built-in publisher, whose route is adopted in place)")
	fs.DurationVar(&f.teardownTimeout, "teardown-timeout", publish.DefaultTeardownTimeout, "a deleted TrafficMap is held by the finalizer "+model.Finalizer+" while its published state goes in order; each wait (weights 0 confirmed by the gateway and the xDS clients, then the xDS removal ACKed) lasts at most this long, and so do a step's failing tries (from the first failed one), then the teardown goes on")
	fs.Float64Var(&f.memoryLimitRatio, "memory-limit-ratio", 0.9, "set Go's soft memory limit to this fraction of the container's memory limit (cgroup) less 64 MiB (the binary's pages, which Go's limit does not count), so the heap is collected harder before the container is killed; 0 turns it off; GOMEMLIMIT in the environment wins")
	fs.StringArrayVar(&f.hostnameEntitlements, "hostname-entitlement", nil, "DOMAIN=NAMESPACE[,NAMESPACE...]: only these namespaces may claim DOMAIN and names below it (repeatable); without any, every namespace may claim any hostname that is not another namespace's gRPC-form name, first claim first served")
}

// newRunCommand returns 'publisher run'; its usage and configuration errors exit 2.
func newRunCommand(stderr io.Writer) *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run --gateway NAMESPACE/NAME [flags]",
		Short: "Watch TrafficMaps and publish their drained weights until stopped",
		Long: `run watches TrafficMaps and publishes their drained weights as HTTPRoute backend weights
and over xDS until stopped (SIGINT or SIGTERM).

Exit codes: 0 stopped, 1 failed at run time, 2 a usage or configuration error.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return exit(exitUsage, fmt.Errorf("unexpected arguments: %s", strings.Join(args, " ")))
			}
			return runCommand(cmd.Context(), f, stderr)
		},
	}
	f.register(cmd.Flags())
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return exit(exitUsage, fmt.Errorf("%w; see '%s --help'", err, c.CommandPath()))
	})
	completeValues(cmd, "log-format", "json", "console")
	completeValues(cmd, "log-level", "debug", "info", "warn", "error")
	completeValues(cmd, "no-positive-policy", string(publish.ApplyCurrent), string(publish.RetainLastPositive))
	completeValues(cmd, "sinks", "httproute,xds", "httproute", "xds")
	return cmd
}

// completeValues completes the flag name of cmd with values.
func completeValues(cmd *cobra.Command, name string, values ...string) {
	_ = cmd.RegisterFlagCompletionFunc(name, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp))
}

// config turns the flags into the publisher's configuration.
func (f runFlags) config() publish.Config {
	cfg := publish.Config{
		GatewaySection:             f.section,
		HostTemplate:               f.hostTemplate,
		RewriteHostname:            f.rewriteHostname,
		BackendKind:                httproute.BackendKind(f.backendKind),
		RouteSettle:                f.routeSettle.config(),
		ResolveInterval:            f.resolveInterval,
		ResolveMinTTL:              f.resolveMinTTL,
		ResolveMaxTTL:              f.resolveMaxTTL,
		RequireRouteAccepted:       f.requireRouteAccepted,
		NoPositivePolicy:           publish.NoPositivePolicy(f.noPositivePolicy),
		Workers:                    f.workers,
		ResyncPeriod:               f.resync,
		QPS:                        float32(f.qps),
		Burst:                      f.burst,
		XDSAddress:                 f.xdsAddress,
		XDSListenerAddress:         f.xdsListenerAddress,
		XDSTLSCert:                 f.xdsTLSCert,
		XDSTLSKey:                  f.xdsTLSKey,
		XDSClientCA:                f.xdsClientCA,
		XDSClientNamespaces:        f.xdsClientNamespaces,
		RequireXDSAck:              f.requireXDSAck,
		XDSMinClients:              f.xdsMinClients,
		XDSMaxNames:                f.xdsMaxNames,
		XDSMaxRequestBytes:         f.xdsMaxRequestBytes,
		XDSMaxStreamsPerConnection: f.xdsMaxStreamsPerConn,
		XDSMaxConnectionsPerClient: f.xdsMaxConnsPerClient,
		XDSReconnectGrace:          f.xdsReconnectGrace,
		XDSPeerGrace:               f.xdsPeerGrace,
		XDSDepartedGrace:           f.xdsDepartedGrace,
		HTTPAddress:                f.httpAddress,
		DebugAddress:               f.debugAddress,
		EnablePprof:                f.pprof,
		PublisherName:              f.publisherName,
		TakeOverFrom:               f.takeOverFrom,
		ClaimNamespace:             f.claimNamespace,
		KnownPublishers:            f.knownPublishers,
		TeardownTimeout:            f.teardownTimeout,
		LeaderElection: publish.LeaderElection{
			Enabled: f.leaderElect, Namespace: f.leaseNamespace, Name: f.leaseName, Identity: f.leaseIdentity,
			LeaseDuration: f.leaseDuration, RenewDeadline: f.renewDeadline, RetryPeriod: f.retryPeriod,
		},
	}
	if ns, name, ok := strings.Cut(f.gateway, "/"); ok {
		cfg.Gateway = types.NamespacedName{Namespace: ns, Name: name}
	} else {
		cfg.Gateway = types.NamespacedName{Name: f.gateway}
	}
	for _, sink := range strings.Split(f.sinks, ",") {
		if sink = strings.TrimSpace(sink); sink != "" {
			cfg.Sinks = append(cfg.Sinks, sink)
		}
	}
	for _, ns := range strings.Split(f.namespaces, ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			cfg.Namespaces = append(cfg.Namespaces, ns)
		}
	}
	for _, raw := range f.hostnameEntitlements {
		e, err := model.ParseEntitlement(raw)
		if err != nil { // kept as given: Validate names the flag and the rule
			domain, list, _ := strings.Cut(raw, "=")
			e = model.Entitlement{Domain: domain, Namespaces: strings.Split(list, ",")}
		}
		cfg.HostnameEntitlements = append(cfg.HostnameEntitlements, e)
	}
	return cfg
}

func runCommand(ctx context.Context, f runFlags, stderr io.Writer) error {
	cfg := f.config()
	if err := cfg.Validate(); err != nil {
		return exit(exitUsage, err)
	}
	if f.memoryLimitRatio < 0 || f.memoryLimitRatio > 1 {
		return exit(exitUsage, fmt.Errorf("%w: --memory-limit-ratio %g: must be between 0 and 1", publish.ErrInvalidConfig, f.memoryLimitRatio))
	}
	log, err := newLogger(f.logFormat, f.logLevel, stderr)
	if err != nil {
		return exit(exitUsage, err)
	}
	defer func() { _ = log.Sync() }()
	setMemoryLimit(f.memoryLimitRatio, log)
	defer routeLibraryLogs(log)()
	if slices.Contains(cfg.Sinks, publish.SinkXDS) {
		switch {
		case f.xdsTLSCert == "":
			log.Warn("the xds port is plaintext: any client that reaches it reads every map's resources and counts for Published; set --xds-tls-cert, --xds-tls-key and --xds-client-ca for mutual TLS")
		case f.xdsClientCA == "":
			log.Warn("the xds port has no --xds-client-ca: clients are not authenticated, and any client that reaches it reads every map's resources and counts for Published")
		}
	}

	rc, err := restConfig(f.kubeconfig, f.context)
	if err != nil {
		return exit(exitUsage, fmt.Errorf("load kubeconfig: %w", err))
	}
	p, err := publish.New(cfg, rc, log.Named("publish"))
	if err != nil {
		return exit(exitUsage, err)
	}
	if err := p.Run(ctx); err != nil {
		log.Error("publisher stopped", zap.Error(err))
		if errors.Is(err, publish.ErrInvalidConfig) {
			return exit(exitUsage, nil)
		}
		return exit(exitFailure, nil)
	}
	return nil
}

func restConfig(kubeconfig, kubeContext string) (*rest.Config, error) {
	if kubeconfig == "" && kubeContext == "" {
		if rc, err := rest.InClusterConfig(); err == nil {
			return rc, nil
		}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules,
		&clientcmd.ConfigOverrides{CurrentContext: kubeContext}).ClientConfig()
}

// newLogger builds the one logger of the process, safe for concurrent use whatever out is.
func newLogger(format, level string, out io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log-level %q: must be debug, info, warn or error", level)
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	var encoder zapcore.Encoder
	switch format {
	case "json":
		encoder = zapcore.NewJSONEncoder(enc)
	case "console":
		enc.EncodeLevel = zapcore.CapitalColorLevelEncoder
		encoder = zapcore.NewConsoleEncoder(enc)
	default:
		return nil, fmt.Errorf("--log-format %q: must be json or console", format)
	}
	return zap.New(zapcore.NewCore(encoder, zapcore.Lock(zapcore.AddSync(out)), lvl)).Named("publisher"), nil
}

// settleFlag is --route-settle: "auto" (the zero value) or a duration.
type settleFlag struct {
	set bool
	d   time.Duration
}

// String implements pflag.Value.
func (s *settleFlag) String() string {
	if !s.set {
		return "auto"
	}
	return s.d.String()
}

// Set implements pflag.Value.
func (s *settleFlag) Set(v string) error {
	if v == "auto" {
		*s = settleFlag{}
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return fmt.Errorf("want auto or a duration of 0s or more, got %q", v)
	}
	*s = settleFlag{set: true, d: d}
	return nil
}

// Type implements pflag.Value.
func (s *settleFlag) Type() string { return "string" }

// config is publish.Config.RouteSettle: 0 for auto, negative for none, else the duration.
func (s settleFlag) config() time.Duration {
	switch {
	case !s.set:
		return 0
	case s.d == 0:
		return -1
	}
	return s.d
}
