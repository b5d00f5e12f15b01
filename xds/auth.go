package xds

import (
	"context"
	"crypto/x509"
	"fmt"
	"slices"
	"strings"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Access is what one xDS stream may see, decided once when it opens from the identity in
// its verified client certificate (see ClientPolicy). The zero Access sees every namespace:
// a stream of a plaintext or server-only TLS xDS port, where no client has an identity and
// every client counts (an explicit choice of the operator). A restricted Access is sent only
// resources of the namespaces it may see, and counts only for those namespaces' maps.
type Access struct {
	// Identity is the client certificate's first identity (URI SAN, DNS SAN, then subject
	// CN), "" without a verified client certificate. For logs and /debug/xds.
	Identity string
	// restricted: only namespaces (patterns, see ClientPolicy) are visible.
	restricted bool
	namespaces []string
}

// Restricted reports whether the stream sees only some namespaces.
func (a Access) Restricted() bool { return a.restricted }

// Sees reports whether the stream may see the resources of namespace.
func (a Access) Sees(namespace string) bool {
	if !a.restricted {
		return true
	}
	for _, p := range a.namespaces {
		if globMatch(p, namespace) {
			return true
		}
	}
	return false
}

// MaySee reports whether cl may see, and so may hold or confirm, the map key
// ("namespace/name") served to its flavour. A restricted client is never sent the Envoy
// flavour's one listener and route configuration (they carry every namespace's hosts), so
// a restricted Envoy client counts for no map.
func (cl ClientState) MaySee(key string) bool {
	if !cl.Access.restricted {
		return true
	}
	if cl.Flavour == FlavourEnvoy {
		return false
	}
	ns, _, _ := strings.Cut(key, "/")
	return cl.Access.Sees(ns)
}

// ClientPolicy says which client identities may see which namespaces. It is a list of
// rules "IDENTITY=NAMESPACE[,NAMESPACE...]": IDENTITY matches one of the client
// certificate's URI SANs (e.g. a SPIFFE ID), DNS SANs or its subject common name;
// NAMESPACE names a namespace. Both may use "*" for any run of characters
// ("spiffe://cluster.local/ns/team-a/*=team-a", "*.gateways.example.com=*"). A client sees
// the union of the namespaces of every rule it matches; a client that matches no rule is
// refused. A nil or empty policy lets every authenticated client see every namespace.
type ClientPolicy struct {
	rules []policyRule
}

type policyRule struct {
	identity   string
	namespaces []string
}

// Bounds on a policy and on what a client certificate contributes to its identity.
const (
	maxPolicyRules    = 256
	maxPatternLen     = 512
	maxIdentities     = 64
	maxIdentityLength = 1024
)

// ParseClientPolicy parses rules "IDENTITY=NAMESPACE[,NAMESPACE...]" (see ClientPolicy).
// Errors name the flag, the rule and what is wrong.
func ParseClientPolicy(rules []string) (*ClientPolicy, error) {
	if len(rules) > maxPolicyRules {
		return nil, fmt.Errorf("--xds-client-namespaces: %d rules, at most %d", len(rules), maxPolicyRules)
	}
	p := &ClientPolicy{}
	for _, r := range rules {
		id, nss, ok := strings.Cut(r, "=")
		id = strings.TrimSpace(id)
		if !ok || id == "" {
			return nil, fmt.Errorf("--xds-client-namespaces %q: must be IDENTITY=NAMESPACE[,NAMESPACE...]", r)
		}
		if len(id) > maxPatternLen {
			return nil, fmt.Errorf("--xds-client-namespaces %q: the identity pattern is longer than %d bytes", r, maxPatternLen)
		}
		rule := policyRule{identity: id}
		for _, ns := range strings.Split(nss, ",") {
			ns = strings.TrimSpace(ns)
			if ns == "" {
				continue
			}
			if len(ns) > 63 && !strings.Contains(ns, "*") {
				return nil, fmt.Errorf("--xds-client-namespaces %q: namespace %q is longer than 63 characters", r, ns)
			}
			rule.namespaces = append(rule.namespaces, ns)
		}
		if len(rule.namespaces) == 0 {
			return nil, fmt.Errorf("--xds-client-namespaces %q: names no namespace (use * for all)", r)
		}
		p.rules = append(p.rules, rule)
	}
	return p, nil
}

// Empty reports whether the policy has no rule: every authenticated client sees every
// namespace.
func (p *ClientPolicy) Empty() bool { return p == nil || len(p.rules) == 0 }

// Access returns what a client with identities (see Identities) may see, and false when
// it matches no rule.
func (p *ClientPolicy) Access(identities []string) (Access, bool) {
	a := Access{}
	if len(identities) > 0 {
		a.Identity = identities[0]
	}
	if p.Empty() {
		return a, true
	}
	var nss []string
	matched := false
	for _, r := range p.rules {
		if !slices.ContainsFunc(identities, func(id string) bool { return globMatch(r.identity, id) }) {
			continue
		}
		matched = true
		nss = append(nss, r.namespaces...)
	}
	if !matched {
		return a, false
	}
	if slices.Contains(nss, "*") {
		return a, true
	}
	slices.Sort(nss)
	a.restricted, a.namespaces = true, slices.Compact(nss)
	return a, true
}

// Identities are the identities of a verified client certificate, in the order policies
// match them: its URI SANs, its DNS SANs, then its subject common name; at most
// maxIdentities, each at most maxIdentityLength bytes (longer ones are left out).
func Identities(cert *x509.Certificate) []string {
	var out []string
	add := func(id string) {
		if id != "" && len(id) <= maxIdentityLength && len(out) < maxIdentities {
			out = append(out, id)
		}
	}
	for _, u := range cert.URIs {
		add(u.String())
	}
	for _, d := range cert.DNSNames {
		add(d)
	}
	add(cert.Subject.CommonName)
	return out
}

// globMatch reports whether s matches pattern, where "*" matches any run of characters
// (including none, and including "/" and ".") and every other character itself.
func globMatch(pattern, s string) bool {
	// Iterative matching with one backtrack point: linear in len(pattern)*len(s) at worst.
	p, i, star, mark := 0, 0, -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case p < len(pattern) && pattern[p] == s[i]:
			p++
			i++
		case star >= 0:
			p = star + 1
			mark++
			i = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// accessKey is the context key of a stream's Access.
type accessKey struct{}

// AccessOf returns the Access the xDS port's authentication gave the stream of ctx; the
// zero Access (every namespace) on a port without client authentication.
func AccessOf(ctx context.Context) Access {
	a, _ := ctx.Value(accessKey{}).(Access)
	return a
}

// authenticate decides a new stream's Access from its peer: with client authentication
// required, a stream without a verified client certificate is refused (Unauthenticated;
// the TLS handshake already refuses such clients, this is the second lock), and one whose
// identities match no rule of the policy is refused (PermissionDenied). Without client
// authentication every stream sees everything.
func (t *TLS) authenticate(ctx context.Context) (Access, error) {
	if t.clientCA == nil {
		return Access{}, nil
	}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return Access{}, status.Error(codes.Unauthenticated, "xds: no peer")
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return Access{}, status.Error(codes.Unauthenticated, "xds: a verified client certificate is required")
	}
	ids := Identities(info.State.VerifiedChains[0][0])
	a, ok := t.policy.Access(ids)
	if !ok {
		return Access{}, status.Errorf(codes.PermissionDenied, "xds: client identity %.256q may see no namespace (--xds-client-namespaces)", strings.Join(ids, ","))
	}
	return a, nil
}

// streamInterceptor authenticates every xDS stream (see authenticate), gives the handler
// (and so the tracker's stream-open callback) the stream's Access in its context, and
// filters what a restricted stream is sent (see accessStream).
func (t *TLS) streamInterceptor(log *zap.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		a, err := t.authenticate(ss.Context())
		if err != nil {
			log.Info("xds stream refused", zap.String("peer", peerOf(ss.Context())), zap.Error(err))
			return err
		}
		return handler(srv, &accessStream{ServerStream: ss, ctx: context.WithValue(ss.Context(), accessKey{}, a), access: a})
	}
}

// accessStream is a stream with its Access: a restricted stream is sent only the resources
// of the namespaces it may see (see resourceNamespace), and a delta stream is told of the
// removal only of resources it was sent. Only the stream's one sending goroutine uses sent.
type accessStream struct {
	grpc.ServerStream
	ctx    context.Context
	access Access
	sent   map[string]map[string]struct{} // delta: names sent, per type URL
}

func (s *accessStream) Context() context.Context { return s.ctx }

func (s *accessStream) SendMsg(m any) error {
	if !s.access.restricted {
		return s.ServerStream.SendMsg(m)
	}
	switch r := m.(type) {
	case *discoveryv3.DiscoveryResponse:
		m = s.filterSotW(r)
	case *discoveryv3.DeltaDiscoveryResponse:
		m = s.filterDelta(r)
	}
	return s.ServerStream.SendMsg(m)
}

// filterSotW returns r with only the resources the stream may see; r (shared) is not
// modified.
func (s *accessStream) filterSotW(r *discoveryv3.DiscoveryResponse) *discoveryv3.DiscoveryResponse {
	kept := make([]*anypb.Any, 0, len(r.GetResources()))
	for _, a := range r.GetResources() {
		if ns, ok := resourceNamespace(r.GetTypeUrl(), a); ok && s.access.Sees(ns) {
			kept = append(kept, a)
		}
	}
	return &discoveryv3.DiscoveryResponse{VersionInfo: r.GetVersionInfo(), Resources: kept, Canary: r.GetCanary(),
		TypeUrl: r.GetTypeUrl(), Nonce: r.GetNonce(), ControlPlane: r.GetControlPlane(), ResourceErrors: r.GetResourceErrors()}
}

// filterDelta returns r with only the resources the stream may see, and only the removals
// of resources it was sent; r (shared) is not modified.
func (s *accessStream) filterDelta(r *discoveryv3.DeltaDiscoveryResponse) *discoveryv3.DeltaDiscoveryResponse {
	if s.sent == nil {
		s.sent = map[string]map[string]struct{}{}
	}
	sent := s.sent[r.GetTypeUrl()]
	if sent == nil {
		sent = map[string]struct{}{}
		s.sent[r.GetTypeUrl()] = sent
	}
	out := &discoveryv3.DeltaDiscoveryResponse{SystemVersionInfo: r.GetSystemVersionInfo(), TypeUrl: r.GetTypeUrl(),
		Nonce: r.GetNonce(), ControlPlane: r.GetControlPlane(), ResourceErrors: r.GetResourceErrors()}
	for _, res := range r.GetResources() {
		if ns, ok := resourceNamespace(r.GetTypeUrl(), res.GetResource()); ok && s.access.Sees(ns) {
			out.Resources = append(out.Resources, res)
			sent[res.GetName()] = struct{}{}
		}
	}
	for _, name := range r.GetRemovedResources() {
		if _, ok := sent[name]; ok {
			out.RemovedResources = append(out.RemovedResources, name)
			delete(sent, name)
		}
	}
	return out
}

// resourceNamespace returns the namespace of the TrafficMap a served resource belongs to,
// false for a resource of no one namespace (the Envoy flavour's one listener and route
// configuration) or one it cannot read. Clusters are named "namespace/name/cluster" and the
// gRPC flavour's route configurations "namespace/name"; a gRPC listener (named after the
// service or a global hostname) belongs to the namespace of the route configuration it
// names.
func resourceNamespace(typeURL string, a *anypb.Any) (string, bool) {
	if a == nil {
		return "", false
	}
	switch typeURL {
	case resource.ClusterType, resource.RouteType:
		return namespaceOfName(encodedName(a.GetValue()))
	case resource.ListenerType:
		var l listenerv3.Listener
		if proto.Unmarshal(a.GetValue(), &l) != nil || l.GetApiListener().GetApiListener() == nil {
			return "", false // the Envoy flavour's listener, or unreadable
		}
		var hcm hcmv3.HttpConnectionManager
		if l.GetApiListener().GetApiListener().UnmarshalTo(&hcm) != nil {
			return "", false
		}
		return namespaceOfName(hcm.GetRds().GetRouteConfigName())
	}
	return "", false
}

// namespaceOfName is the namespace part of a "namespace/..." resource name.
func namespaceOfName(name string) (string, bool) {
	ns, _, ok := strings.Cut(name, "/")
	return ns, ok && ns != ""
}

// encodedName reads field 1 (the name of a Cluster, Listener and RouteConfiguration) of
// an encoded message, "" when absent or malformed.
func encodedName(b []byte) string {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		if num == 1 && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return ""
			}
			return string(v)
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return ""
		}
		b = b[n:]
	}
	return ""
}
