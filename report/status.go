package report

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/model/replicas"
	"github.com/trafficmap/publisher/weights"
)

// APIVersion is the version of the reports' JSON and YAML form.
const APIVersion = "publisher.trafficmap.dev/v1alpha1"

// Freshness of the Published condition.
const (
	Current = "Current" // observedGeneration is the TrafficMap's generation
	Stale   = "Stale"   // it is an older generation
	Absent  = "Absent"  // no Published condition
)

// Verdicts of the route's parent Gateway.
const (
	VerdictAccepted = "Accepted"
	VerdictPending  = "Pending"
	VerdictRejected = "Rejected"
)

// Drain annotation states.
const (
	AnnotationAbsent    = "Absent"
	AnnotationValid     = "Valid"
	AnnotationMalformed = "Malformed"
)

// Objects are what one TrafficMap's status is computed from.
type Objects struct {
	TrafficMap *v1beta1.TrafficMap
	// Source is the InferenceService's metadata; nil when it does not exist.
	Source *metav1.PartialObjectMetadata
	// Route is the HTTPRoute at the publisher's name for the map; nil when absent.
	Route *gwapiv1.HTTPRoute
	// Gateway overrides the Gateway whose verdict is read; zero means the route's first
	// parentRef.
	Gateway        types.NamespacedName
	GatewaySection string
	// Clusters are the taint sources' views of the entry clusters (fleet drains), as the
	// publisher reads them.
	Clusters []model.ClusterTaints
	// XDS is the publisher's /debug/xds document; nil when it was not read.
	XDS *model.XDSDebugState
	// Record is the fallback state of the publisher's record ConfigMap, read when there is
	// no route (--sinks xds alone); nil otherwise.
	Record *model.Recorded
	// XDSSource is where XDS was read from.
	XDSSource string
	// Replicas are the replicas whose xDS reports the publisher counts (its
	// /debug/replicas); nil without leader election or when not read.
	Replicas []replicas.Replica
	// Claims are the other TrafficMaps' claims on names (their "<service>.<namespace>" and
	// ome.io/global-host), as far as they were read; the map's hostname ownership is
	// recomputed from them with the publisher's rule.
	Claims []model.Claim
	// ClaimsRead is false when the other maps could not be read (forbidden): the map's
	// hostname ownership is then not reported.
	ClaimsRead bool
}

// Status is the status of one TrafficMap.
type Status struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace"`
	TrafficMap string `json:"trafficMap"`
	Service    string `json:"service"`
	Generation int64  `json:"generation"`
	// Clusters has one row per entry, sorted by cluster.
	Clusters []Cluster `json:"clusters"`
	// Pending are drains naming a cluster with no entry.
	Pending []Drain `json:"pending"`
	// Ramps are the gradual drains and undrains that shape the effective weights now
	// (weights.RampAnnotation), sorted by cluster; omitted when none.
	Ramps []Ramp `json:"ramps,omitempty"`
	// Drains is the state of the ome.io/traffic-drain annotation.
	Drains DrainState `json:"drains"`
	// TaintError and TolerationError report malformed fleet-drain input for which the
	// publisher keeps the last valid state recorded on the route.
	TaintError      string `json:"taintError,omitempty"`
	TolerationError string `json:"tolerationError,omitempty"`
	// Tolerations are the service's tolerations in effect (the annotation's, or the last
	// valid ones the publisher keeps), formatted as weights.Toleration.String does.
	Tolerations []string `json:"tolerations,omitempty"`
	// Error says why no effective weights could be computed; empty when they were.
	Error string `json:"error,omitempty"`
	// Hostnames are the map's names (its hostname and "<service>.<namespace>") and who
	// holds each, by the publisher's rule (model.ResolveHostnames) over the TrafficMaps
	// status read (every namespace's, else the map's namespace's); omitted when it could
	// read none.
	Hostnames []Hostname `json:"hostnames,omitempty"`
	Published Published  `json:"published"`
	// PublicationFallback is the map's PublicationFallback condition (True while the sinks
	// serve a retained plan rather than its current inputs), nil when it has none.
	PublicationFallback *Condition `json:"publicationFallback,omitempty"`
	Sinks               Sinks      `json:"sinks"`
}

// Condition is one of the TrafficMap's conditions, field by field; Message is the
// publisher's explanation, verbatim.
type Condition struct {
	Status             string `json:"status"`
	Reason             string `json:"reason,omitempty"`
	Message            string `json:"message,omitempty"`
	ObservedGeneration int64  `json:"observedGeneration,omitempty"`
}

// Ramp is where one gradual drain (down) or undrain (up) stands: Step of Steps is in the
// effective weights, Percent of the cluster's full weight; the next step is due at Next
// (once the step before is in place on every sink), the last at End.
type Ramp struct {
	Cluster   string    `json:"cluster"`
	Direction string    `json:"direction"`
	Step      int       `json:"step"`
	Steps     int       `json:"steps"`
	Percent   int       `json:"percent"`
	Next      time.Time `json:"next"`
	End       time.Time `json:"end"`
}

// Hostname is one of the map's names.
type Hostname struct {
	Name string `json:"name"`
	// Held is true when the map holds the name; otherwise Owner does.
	Held  bool           `json:"held"`
	Owner *HostnameOwner `json:"owner,omitempty"`
}

// HostnameOwner is the claim that holds one of the map's names.
type HostnameOwner struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Hostname is the owner's name that overlaps the map's.
	Hostname string      `json:"hostname"`
	Created  metav1.Time `json:"created"`
}

// Cluster is one TrafficMap entry.
type Cluster struct {
	Cluster string `json:"cluster"`
	Weight  int32  `json:"weight"`
	// Effective is the weight the publisher computes; nil when it cannot compute one.
	Effective *int32 `json:"effective"`
	HeldBy    []Hold `json:"heldBy,omitempty"`
	// Taints are the cluster's NoExecute taints the service does not tolerate (fleet drains).
	Taints []string `json:"taints,omitempty"`
}

// Hold is one drain holding a cluster.
type Hold struct {
	ID     string `json:"id"`
	Reason string `json:"reason,omitempty"`
	// Source is "annotation" (a drain of ome.io/traffic-drain, or of the last valid set kept
	// for a malformed one), "drainRefs" (only the entry's drainRefs) or "both".
	Source string `json:"source"`
}

// Drain is one drain of the annotation.
type Drain struct {
	ID      string `json:"id"`
	Cluster string `json:"cluster"`
	Reason  string `json:"reason"`
}

// DrainState is the state of the drain annotation.
type DrainState struct {
	State string `json:"state"`
	// Error is the parser's error for a malformed annotation.
	Error string `json:"error,omitempty"`
	// NoFallback is true for a malformed annotation when no route records a last valid drain
	// set (model.ErrNoDrainFallback): no weights are computed and InEffect is empty. It is
	// not part of the JSON form, where Status.Error says the same.
	NoFallback bool `json:"-"`
	// InEffect is the drain set the weights are computed with: the annotation's, or for a
	// malformed annotation the last valid set recorded on the route.
	InEffect []Drain `json:"inEffect"`
}

// Published is the TrafficMap's Published condition, field by field; Message is the
// publisher's explanation, verbatim.
type Published struct {
	Status             string       `json:"status"`
	Reason             string       `json:"reason,omitempty"`
	Message            string       `json:"message,omitempty"`
	ObservedGeneration int64        `json:"observedGeneration,omitempty"`
	LastTransitionTime *metav1.Time `json:"lastTransitionTime,omitempty"`
	Freshness          string       `json:"freshness"`
	// LastPublishedGeneration is status.observedTrafficMapGeneration.
	LastPublishedGeneration int64 `json:"lastPublishedGeneration,omitempty"`
}

// Sinks is what each sink realized.
type Sinks struct {
	HTTPRoute RouteSink `json:"httpRoute"`
	XDS       XDSSink   `json:"xds"`
}

// XDSSink is the xDS client state the publisher's /debug/xds reports. It is the publisher's
// state when it was read, not part of the TrafficMap: the Published condition's message is
// what the publisher concluded from it for this map.
type XDSSink struct {
	// Reported is true when /debug/xds was read (status --publisher-url).
	Reported bool `json:"reported"`
	// Source is the URL it was read from.
	Source string `json:"source,omitempty"`
	// Served is the version served to each flavour, per resource type ("Listener",
	// "RouteConfiguration", "Cluster"). Every flavour's snapshot carries every map the
	// publisher serves over xDS.
	Served map[model.Flavour]map[string]string `json:"served,omitempty"`
	// Clients are the connected clients, sorted by node id.
	Clients []XDSClient `json:"clients"`
	// Replicas are the publisher's replicas with their xDS clients, when it runs several
	// (every live replica's relevant clients count for Published).
	Replicas []replicas.Replica `json:"replicas,omitempty"`
	// Map is this map's relevance as the publisher judges it (model.XDSDebugMap): nil when the
	// publisher did not report it (it does not serve the map, or an older publisher).
	Map *XDSMap `json:"map,omitempty"`
}

// XDSMap is who counts for one map's xDS confirmation: the client streams subscribed to
// one of its resources (a stream subscribed to nothing of it neither blocks nor counts),
// and of those, which ACKed its current content and which it still waits for. Streams are
// named as /debug/xds names them (node id, stream, peer).
type XDSMap struct {
	Relevant []string `json:"relevant"`
	Acked    []string `json:"acked"`
	Waiting  []string `json:"waiting"`
}

// XDSClient is one connected xDS client.
type XDSClient struct {
	NodeID  string        `json:"nodeID"`
	Flavour model.Flavour `json:"flavour"`
	// Acked is the last version the client ACKed, per resource type.
	Acked map[string]string `json:"acked"`
	// Nacked is the client's last NACK per resource type (cleared by a later ACK of it).
	Nacked map[string]XDSNack `json:"nacked,omitempty"`
	// Current is true when the client ACKed, for every resource type served to its flavour,
	// the version served now, which carries the map's weights as the publisher serves them.
	// A client that is not current may still hold the map's current weights (a version
	// that changed only other maps); the Published condition tells.
	Current bool `json:"current"`
}

// XDSNack is a client's rejection of one version.
type XDSNack struct {
	Version string `json:"version"`
	Message string `json:"message"`
}

// RouteSink is the publisher's HTTPRoute for the map.
type RouteSink struct {
	Name  string `json:"name"`
	Found bool   `json:"found"`
	// Owned is false for a route at the publisher's name that the publisher does not own.
	Owned      bool  `json:"owned"`
	Generation int64 `json:"generation,omitempty"`
	// TrafficMapGeneration is the map generation the route was built from.
	TrafficMapGeneration string        `json:"trafficMapGeneration,omitempty"`
	Weights              []RouteWeight `json:"weights,omitempty"`
	Gateway              string        `json:"gateway,omitempty"`
	Verdict              string        `json:"verdict,omitempty"`
	Message              string        `json:"message,omitempty"`
	// MatchesComputed reports whether the route's weights are the computed effective ones.
	MatchesComputed bool `json:"matchesComputed"`
}

// RouteWeight is one backend of the route.
type RouteWeight struct {
	// Cluster is the entry the backend Service stands for; empty when none does.
	Cluster string `json:"cluster,omitempty"`
	Backend string `json:"backend"`
	Weight  int32  `json:"weight"`
}

// Build computes the status from the objects. It is pure.
func Build(o Objects) Status {
	tm := o.TrafficMap
	s := Status{
		APIVersion: APIVersion, Kind: "TrafficStatus",
		Namespace: tm.Namespace, TrafficMap: tm.Name, Service: tm.Spec.Service, Generation: tm.Generation,
		Clusters: []Cluster{}, Pending: []Drain{},
		Drains: DrainState{State: AnnotationAbsent, InEffect: []Drain{}},
		Sinks:  Sinks{XDS: xdsSink(o.XDS, o.XDSSource, model.KeyOf(tm).String(), o.Replicas)},
	}
	src := httproute.Source{Namespace: tm.Namespace, Name: tm.Name}
	route := o.Route
	if route != nil && !httproute.Owned(route.Labels, src) {
		route = nil // the publisher trusts nothing of a foreign route, and neither do we
	}

	computed, err := compute(o, route)
	for _, e := range tm.Spec.Entries {
		s.Clusters = append(s.Clusters, Cluster{Cluster: e.Cluster, Weight: e.Weight})
	}
	sort.Slice(s.Clusters, func(i, j int) bool { return s.Clusters[i].Cluster < s.Clusters[j].Cluster })
	if o.Source != nil {
		if _, ok := o.Source.Annotations[weights.DrainAnnotation]; ok {
			s.Drains.State = AnnotationValid
		}
	}
	var parseErr error
	switch {
	case errors.Is(err, model.ErrNoDrainFallback):
		parseErr = err
	case err == nil && computed.DrainErr != nil:
		parseErr = computed.DrainErr
	}
	if parseErr != nil {
		s.Drains.State, s.Drains.Error = AnnotationMalformed, parseErr.Error()
		s.Drains.NoFallback = errors.Is(parseErr, model.ErrNoDrainFallback)
	}
	if err != nil {
		s.Error = err.Error()
	} else {
		s.Drains.InEffect = drainsOf(computed.Drains)
		s.Pending = drainsOf(computed.Result.Pending)
		s.Clusters = clusters(tm, computed)
		for _, p := range computed.Progress {
			s.Ramps = append(s.Ramps, Ramp{Cluster: p.Cluster, Direction: string(p.Direction), Step: p.Step, Steps: p.Steps,
				Percent: p.Percent(), Next: p.Next.UTC(), End: p.End.UTC()})
		}
		if computed.TaintErr != nil {
			s.TaintError = computed.TaintErr.Error()
		}
		if computed.TolerationErr != nil {
			s.TolerationError = computed.TolerationErr.Error()
		}
		for _, tol := range computed.Tolerations {
			s.Tolerations = append(s.Tolerations, tol.String())
		}
	}
	s.Published = published(tm)
	if c := model.FindFallback(tm); c != nil {
		s.PublicationFallback = &Condition{Status: string(c.Status), Reason: c.Reason, Message: c.Message, ObservedGeneration: c.ObservedGeneration}
	}
	s.Sinks.HTTPRoute = routeSink(o, src, computed, err == nil)
	if o.ClaimsRead {
		s.Hostnames = hostnames(o, route)
	}
	return s
}

// hostnames resolves the map's names against o.Claims. Its hostname is the
// ome.io/global-host annotation, else the one its own route lists (the publisher rendered
// --host-template there).
func hostnames(o Objects, route *gwapiv1.HTTPRoute) []Hostname {
	tm := o.TrafficMap
	self := model.Claim{Kind: model.KindTrafficMap, Namespace: tm.Namespace, Name: tm.Name, Created: tm.CreationTimestamp.Time,
		Names: []string{model.GRPCName(tm.Namespace, tm.Spec.Service)}, Journaled: model.JournaledNames(tm, "")}
	host := ""
	if o.Source != nil {
		host = strings.TrimSpace(o.Source.Annotations[v1beta1.AnnotationGlobalHost])
	}
	if host == "" && route != nil && len(route.Spec.Hostnames) > 0 {
		host = string(route.Spec.Hostnames[0])
	}
	if host != "" {
		self.Names = append(self.Names, host)
	}
	own := model.ResolveHostnames(self, o.Claims)
	out := make([]Hostname, 0, len(own.Owned)+len(own.Conflicts))
	// A name no one holds is the map's: the publisher journals it before it serves it.
	for _, n := range append(own.Owned, own.Claimable...) {
		out = append(out, Hostname{Name: n, Held: true})
	}
	for _, c := range own.Conflicts {
		out = append(out, Hostname{Name: c.Hostname, Owner: &HostnameOwner{Kind: c.Owner.Kind, Namespace: c.Owner.Namespace,
			Name: c.Owner.Name, Hostname: c.Owner.Hostname, Created: metav1.NewTime(c.Owner.Created)}})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// compute runs the publisher's computation, with the publisher's checks of the source.
func compute(o Objects, route *gwapiv1.HTTPRoute) (model.Computed, error) {
	tm := o.TrafficMap
	if o.Source == nil {
		return model.Computed{}, fmt.Errorf("inferenceservice %s/%s named by spec.service does not exist", tm.Namespace, tm.Spec.Service)
	}
	if tm.Status.SourceUID != "" && tm.Status.SourceUID != o.Source.UID {
		return model.Computed{}, fmt.Errorf("inferenceservice %s/%s has uid %s but status.sourceUID is %s",
			tm.Namespace, tm.Spec.Service, o.Source.UID, tm.Status.SourceUID)
	}
	recorded := httproute.Recorded(route)
	if o.Record != nil {
		recorded = *o.Record
	}
	return model.Compute(model.Inputs{TrafficMap: tm, SourceAnnotations: o.Source.Annotations, Recorded: recorded, Clusters: o.Clusters})
}

func clusters(tm *v1beta1.TrafficMap, c model.Computed) []Cluster {
	reasons := map[string]string{}
	annotated := map[string]map[string]bool{} // cluster -> drain IDs
	for _, d := range c.Drains {
		reasons[d.ID] = d.Reason
		if annotated[d.Cluster] == nil {
			annotated[d.Cluster] = map[string]bool{}
		}
		annotated[d.Cluster][d.ID] = true
	}
	refs := map[string]map[string]bool{}
	for _, e := range tm.Spec.Entries {
		refs[e.Cluster] = map[string]bool{}
		for _, id := range e.DrainRefs {
			refs[e.Cluster][id] = true
		}
	}
	out := make([]Cluster, 0, len(c.Result.Entries))
	for _, e := range c.Result.Entries {
		row := Cluster{Cluster: e.Cluster, Weight: e.Weight, Effective: ptr(e.Effective)}
		for _, id := range e.HeldBy {
			h := Hold{ID: id}
			inAnnotation, inRefs := annotated[e.Cluster][id], refs[e.Cluster][id]
			switch {
			case inAnnotation && inRefs:
				h.Source, h.Reason = "both", reasons[id]
			case inAnnotation:
				h.Source, h.Reason = "annotation", reasons[id]
			default:
				h.Source = "drainRefs"
			}
			row.HeldBy = append(row.HeldBy, h)
		}
		for _, taint := range e.Taints {
			row.Taints = append(row.Taints, taint.String())
		}
		out = append(out, row)
	}
	return out
}

func drainsOf(ds []weights.Drain) []Drain {
	out := make([]Drain, 0, len(ds))
	for _, d := range ds {
		out = append(out, Drain{ID: d.ID, Cluster: d.Cluster, Reason: d.Reason})
	}
	return out
}

func published(tm *v1beta1.TrafficMap) Published {
	p := Published{Status: "Unknown", Freshness: Absent, LastPublishedGeneration: tm.Status.ObservedTrafficMapGeneration}
	c := meta.FindStatusCondition(tm.Status.Conditions, v1beta1.ConditionPublished)
	if c == nil {
		return p
	}
	p.Status, p.Reason, p.Message, p.ObservedGeneration = string(c.Status), c.Reason, c.Message, c.ObservedGeneration
	if !c.LastTransitionTime.IsZero() {
		p.LastTransitionTime = c.LastTransitionTime.DeepCopy()
	}
	p.Freshness = Stale
	if c.ObservedGeneration == tm.Generation {
		p.Freshness = Current
	}
	return p
}

// xdsSink reduces the /debug/xds document; d nil means it was not read.
func xdsSink(d *model.XDSDebugState, source, key string, reps []replicas.Replica) XDSSink {
	x := XDSSink{Clients: []XDSClient{}}
	if d == nil {
		return x
	}
	x.Replicas = slices.Clone(reps)
	x.Reported, x.Source = true, source
	for _, m := range d.Maps {
		if m.Key != key {
			continue
		}
		xm := &XDSMap{Relevant: slices.Clone(m.Relevant), Acked: slices.Clone(m.Acked), Waiting: []string{}}
		for _, id := range m.Relevant {
			if !slices.Contains(m.Acked, id) {
				xm.Waiting = append(xm.Waiting, id)
			}
		}
		x.Map = xm
	}
	for f, vs := range d.Snapshots {
		if x.Served == nil {
			x.Served = map[model.Flavour]map[string]string{}
		}
		x.Served[f] = map[string]string{}
		for typ, v := range vs {
			x.Served[f][typ] = v
		}
	}
	for _, c := range d.Clients {
		xc := XDSClient{NodeID: c.NodeID, Flavour: c.Flavour, Acked: map[string]string{}}
		for typ, v := range c.Acked {
			xc.Acked[typ] = v
		}
		for typ, n := range c.Nacked {
			if xc.Nacked == nil {
				xc.Nacked = map[string]XDSNack{}
			}
			xc.Nacked[typ] = XDSNack{Version: n.Version, Message: n.Message}
		}
		served := d.Snapshots[c.Flavour]
		xc.Current = len(served) > 0
		for typ, v := range served {
			xc.Current = xc.Current && c.Acked[typ] == v
		}
		x.Clients = append(x.Clients, xc)
	}
	sort.SliceStable(x.Clients, func(i, j int) bool { return x.Clients[i].NodeID < x.Clients[j].NodeID })
	return x
}

func routeSink(o Objects, src httproute.Source, c model.Computed, computed bool) RouteSink {
	tm := o.TrafficMap
	rs := RouteSink{Name: model.Key(tm.Namespace, httproute.RouteName(tm.Name)).String()}
	r := o.Route
	if r == nil {
		return rs
	}
	rs.Found, rs.Owned, rs.Generation = true, httproute.Owned(r.Labels, src), r.Generation
	if !rs.Owned {
		rs.Message = "route exists and is not owned by the publisher for this trafficmap"
		return rs
	}
	rs.TrafficMapGeneration = r.Annotations[httproute.AnnotationTrafficMapGeneration]
	byBackend := map[string]string{}
	for _, e := range tm.Spec.Entries {
		byBackend[httproute.ServiceName(tm.Namespace, tm.Name, e.Cluster)] = e.Cluster
	}
	stored, _ := httproute.RouteWeights(r)
	for backend, w := range stored {
		rs.Weights = append(rs.Weights, RouteWeight{Cluster: byBackend[backend], Backend: backend, Weight: w})
	}
	sort.Slice(rs.Weights, func(i, j int) bool {
		a, b := rs.Weights[i], rs.Weights[j]
		if a.Cluster != b.Cluster {
			return a.Cluster < b.Cluster
		}
		return a.Backend < b.Backend
	})
	if computed {
		rs.MatchesComputed = len(stored) == len(c.Result.Entries)
		for _, e := range c.Result.Entries {
			w, ok := stored[httproute.ServiceName(tm.Namespace, tm.Name, e.Cluster)]
			rs.MatchesComputed = rs.MatchesComputed && ok && w == e.Effective
		}
	}

	cfg := httproute.Config{Gateway: o.Gateway, GatewaySection: o.GatewaySection}
	if cfg.Gateway.Name == "" && len(r.Spec.ParentRefs) > 0 {
		ref := r.Spec.ParentRefs[0]
		cfg.Gateway = types.NamespacedName{Namespace: r.Namespace, Name: string(ref.Name)}
		if ref.Namespace != nil {
			cfg.Gateway.Namespace = string(*ref.Namespace)
		}
		if ref.SectionName != nil {
			cfg.GatewaySection = string(*ref.SectionName)
		}
	}
	if cfg.Gateway.Name == "" {
		rs.Message = "route has no parentRef and no --gateway is given"
		return rs
	}
	if cfg.Gateway.Namespace == "" {
		cfg.Gateway.Namespace = r.Namespace
	}
	rs.Gateway = cfg.Gateway.String()
	acc := cfg.Acceptance(r)
	rs.Verdict = map[httproute.Verdict]string{httproute.Accepted: VerdictAccepted, httproute.Pending: VerdictPending, httproute.Rejected: VerdictRejected}[acc.Verdict]
	rs.Message = acc.Message
	return rs
}

func ptr[T any](v T) *T { return &v }
