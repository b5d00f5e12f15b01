package publish

import (
	"slices"
	"sync"
	"sync/atomic"
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/model"
)

// The informers' transforms. Each builds a new, smaller object holding only what the
// publisher reads of the decoded one (it never edits the object it is handed, so a
// tombstone's object, already cached, passes through untouched), and canonicalizes the
// strings many cached objects repeat (namespaces, label keys and values, owner-reference
// kinds, cluster names, condition types and reasons) with the unique package, so the fleet's
// objects share one copy of each. Cached objects are never modified (caches), so sharing
// strings and pointers between them is safe. Anything of another type (a tombstone) is
// returned as it is.

// intern returns the canonical copy of s.
func intern[S ~string](s S) S {
	if s == "" {
		return s
	}
	return S(unique.Make(string(s)).Value())
}

// Shared pointers for the optional booleans of owner references.
var (
	sharedTrue  = new(true)
	sharedFalse = new(false)
)

func internBool(b *bool) *bool {
	switch {
	case b == nil:
		return nil
	case *b:
		return sharedTrue
	default:
		return sharedFalse
	}
}

func internTypeMeta(t metav1.TypeMeta) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: intern(t.APIVersion), Kind: intern(t.Kind)}
}

// slimMeta keeps an object's identity, version, lifecycle and finalizers, without labels,
// annotations, owner references and managedFields (the callers add what they read).
func slimMeta(m *metav1.ObjectMeta) metav1.ObjectMeta {
	out := metav1.ObjectMeta{Name: m.Name, Namespace: intern(m.Namespace), UID: m.UID, ResourceVersion: m.ResourceVersion,
		Generation: m.Generation, CreationTimestamp: m.CreationTimestamp, DeletionTimestamp: m.DeletionTimestamp,
		DeletionGracePeriodSeconds: m.DeletionGracePeriodSeconds}
	if len(m.Finalizers) > 0 {
		out.Finalizers = make([]string, len(m.Finalizers))
		for i, f := range m.Finalizers {
			out.Finalizers[i] = intern(f)
		}
	}
	return out
}

// keepStrings returns the entries of m whose key keep accepts, keys and values canonical;
// nil when none.
func keepStrings(m map[string]string, keep func(string) bool) map[string]string {
	var out map[string]string
	for k, v := range m {
		if !keep(k) {
			continue
		}
		if out == nil {
			out = make(map[string]string, len(m))
		}
		out[intern(k)] = intern(v)
	}
	return out
}

// labelPairs returns the entries of m whose key keep accepts as key, value pairs sorted by
// key, each string a unique handle; nil when none.
func labelPairs(m map[string]string, keep func(string) bool) []unique.Handle[string] {
	var keys []string
	for k := range m {
		if keep(k) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	slices.Sort(keys)
	out := make([]unique.Handle[string], 0, 2*len(keys))
	for _, k := range keys {
		out = append(out, unique.Make(k), unique.Make(m[k]))
	}
	return out
}

func slimOwnerReferences(refs []metav1.OwnerReference) []metav1.OwnerReference {
	if len(refs) == 0 {
		return nil
	}
	out := make([]metav1.OwnerReference, len(refs))
	for i, r := range refs {
		out[i] = metav1.OwnerReference{APIVersion: intern(r.APIVersion), Kind: intern(r.Kind), Name: intern(r.Name), UID: intern(r.UID),
			Controller: internBool(r.Controller), BlockOwnerDeletion: internBool(r.BlockOwnerDeletion)}
	}
	return out
}

// cachedService is what the backend Service cache holds of a Service (slimService): what
// httproute.Writer and the sink's expectations read of it (identity, version, lifecycle,
// the labels httproute reads, owner references, type, external name and ports), in under
// half the size of a corev1.Service's metadata alone. The labels, owner references and
// ports are unique handles: a fleet's Services share one copy of each key, value, owner
// (the 8 Services of a map have the same) and port. The informer reads its metadata
// through GetObjectMeta (meta.Accessor); the Service cache's reads (caches.Services) hand
// it out as a *corev1.Service built on each read.
type cachedService struct {
	name, namespace   string
	uid               types.UID
	resourceVersion   string
	deletionTimestamp *metav1.Time
	finalizers        []string
	// labels are the labels httproute reads, as sorted key, value pairs.
	labels       []unique.Handle[string]
	owners       []unique.Handle[cachedOwner]
	serviceType  corev1.ServiceType
	externalName string
	ports        []unique.Handle[cachedPort]
}

// cachedOwner is an owner reference as a comparable value; controller and blockDeletion
// are 0 for unset, 1 for false, 2 for true.
type cachedOwner struct {
	APIVersion, Kind, Name    string
	UID                       types.UID
	controller, blockDeletion uint8
}

// cachedPort is a Service port by name, port and protocol (what the writer compares).
type cachedPort struct {
	Name     string
	Protocol corev1.Protocol
	Port     int32
}

func ownerBool(b *bool) uint8 {
	switch {
	case b == nil:
		return 0
	case *b:
		return 2
	default:
		return 1
	}
}

func ownerBoolPtr(v uint8) *bool {
	switch v {
	case 2:
		return sharedTrue
	case 1:
		return sharedFalse
	default:
		return nil
	}
}

// Labels returns the Service's labels that httproute reads, as a new map.
func (s *cachedService) Labels() map[string]string {
	if len(s.labels) == 0 {
		return nil
	}
	out := make(map[string]string, len(s.labels)/2)
	for i := 0; i+1 < len(s.labels); i += 2 {
		out[s.labels[i].Value()] = s.labels[i+1].Value()
	}
	return out
}

// GetObjectMeta returns the Service's metadata, built for this call: it makes a
// cachedService a metav1.ObjectMetaAccessor, which is how meta.Accessor (the informer's
// keys and resource versions, the event handlers' labels) reads it.
func (s *cachedService) GetObjectMeta() metav1.Object { return s.objectMeta() }

// objectMeta is the Service's metadata, built for this call.
func (s *cachedService) objectMeta() *metav1.ObjectMeta {
	m := &metav1.ObjectMeta{Name: s.name, Namespace: s.namespace, UID: s.uid, ResourceVersion: s.resourceVersion,
		DeletionTimestamp: s.deletionTimestamp, Finalizers: s.finalizers, Labels: s.Labels()}
	if len(s.owners) > 0 {
		m.OwnerReferences = make([]metav1.OwnerReference, len(s.owners))
		for i, h := range s.owners {
			o := h.Value()
			m.OwnerReferences[i] = metav1.OwnerReference{APIVersion: o.APIVersion, Kind: o.Kind, Name: o.Name, UID: o.UID,
				Controller: ownerBoolPtr(o.controller), BlockOwnerDeletion: ownerBoolPtr(o.blockDeletion)}
		}
	}
	return m
}

// service returns the Service s holds: its metadata (GetObjectMeta) and the type,
// external name and ports.
func (s *cachedService) service() *corev1.Service {
	svc := &corev1.Service{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}, ObjectMeta: *s.objectMeta(),
		Spec: corev1.ServiceSpec{Type: s.serviceType, ExternalName: s.externalName}}
	if len(s.ports) > 0 {
		svc.Spec.Ports = make([]corev1.ServicePort, len(s.ports))
		for i, h := range s.ports {
			p := h.Value()
			svc.Spec.Ports[i] = corev1.ServicePort{Name: p.Name, Port: p.Port, Protocol: p.Protocol}
		}
	}
	return svc
}

// slimService is the backend Service informer's transform: it keeps what the publisher
// reads of its own Services (httproute.Writer and the sink's expectations) as a
// cachedService: identity, version, lifecycle, the labels httproute reads
// (httproute.ReadsLabel), owner references, type, external name and ports by name, port and
// protocol. It drops the rest (managedFields, annotations, the creation time, the API
// server's defaults such as cluster IPs, session affinity and target ports, status): at 8
// Services per map, most of the cache.
func slimService(obj any) (any, error) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return obj, nil
	}
	m := slimMeta(&svc.ObjectMeta)
	slim := &cachedService{name: m.Name, namespace: m.Namespace, uid: m.UID, resourceVersion: m.ResourceVersion,
		deletionTimestamp: m.DeletionTimestamp, finalizers: m.Finalizers, serviceType: intern(svc.Spec.Type), externalName: svc.Spec.ExternalName}
	slim.labels = labelPairs(svc.Labels, httproute.ReadsLabel)
	if len(svc.OwnerReferences) > 0 {
		slim.owners = make([]unique.Handle[cachedOwner], len(svc.OwnerReferences))
		for i, r := range svc.OwnerReferences {
			slim.owners[i] = unique.Make(cachedOwner{APIVersion: r.APIVersion, Kind: r.Kind, Name: r.Name, UID: r.UID,
				controller: ownerBool(r.Controller), blockDeletion: ownerBool(r.BlockOwnerDeletion)})
		}
	}
	if len(svc.Spec.Ports) > 0 {
		slim.ports = make([]unique.Handle[cachedPort], len(svc.Spec.Ports))
		for i, p := range svc.Spec.Ports {
			slim.ports[i] = unique.Make(cachedPort{Name: p.Name, Port: p.Port, Protocol: p.Protocol})
		}
	}
	return slim, nil
}

// slimRoute is the HTTPRoute informer's transform. The publisher reads a route's labels
// (ownership, adoption: httproute.ReadsLabel), its annotations (httproute.ReadsAnnotation:
// what Build sets, which Matches compares, and the records), owner references, the whole
// spec (Matches, and a foreign route's hostnames and parents) and the parents' status
// (httproute.Config.Acceptance); it drops managedFields and every other label and
// annotation (a kubectl last-applied configuration, for one). The status strings every
// route repeats are canonical, and the references' optional group, kind, namespace and
// section point at shared values (sharedPtr).
func slimRoute(obj any) (any, error) {
	route, ok := obj.(*gwapiv1.HTTPRoute)
	if !ok {
		return obj, nil
	}
	meta := slimMeta(&route.ObjectMeta)
	meta.Labels = keepStrings(route.Labels, httproute.ReadsLabel)
	meta.Annotations = keepStrings(route.Annotations, httproute.ReadsAnnotation)
	meta.OwnerReferences = slimOwnerReferences(route.OwnerReferences)
	slim := &gwapiv1.HTTPRoute{TypeMeta: internTypeMeta(route.TypeMeta), ObjectMeta: meta, Spec: route.Spec}
	slim.Spec.ParentRefs = sharedParentRefs(route.Spec.ParentRefs)
	if len(route.Spec.Rules) > 0 {
		slim.Spec.Rules = make([]gwapiv1.HTTPRouteRule, len(route.Spec.Rules))
		for i, r := range route.Spec.Rules {
			slim.Spec.Rules[i] = r
			slim.Spec.Rules[i].BackendRefs = sharedBackendRefs(r.BackendRefs)
		}
	}
	if parents := route.Status.Parents; len(parents) > 0 {
		slim.Status.Parents = make([]gwapiv1.RouteParentStatus, len(parents))
		for i, p := range parents {
			slim.Status.Parents[i] = gwapiv1.RouteParentStatus{ParentRef: sharedParentRef(p.ParentRef), ControllerName: intern(p.ControllerName),
				Conditions: slimConditions(p.Conditions, nil)}
		}
	}
	return slim, nil
}

// sharedPtrs holds one pointer per value of the few-valued optional fields of route
// references (group, kind, namespace, section): the routes share them. It never shrinks, so
// it takes at most maxSharedPtrs values (foreign routes may hold any); past that, pointers
// are kept as decoded.
var (
	sharedPtrs  sync.Map // value -> pointer to it
	sharedCount atomic.Int64
)

const maxSharedPtrs = 4096

// sharedPtr returns the shared pointer to *p's value (p itself the first time), nil for nil.
func sharedPtr[T comparable](p *T) *T {
	if p == nil {
		return nil
	}
	if v, ok := sharedPtrs.Load(*p); ok {
		return v.(*T)
	}
	if sharedCount.Load() >= maxSharedPtrs {
		return p
	}
	v, loaded := sharedPtrs.LoadOrStore(*p, p)
	if !loaded {
		sharedCount.Add(1)
	}
	return v.(*T)
}

func sharedParentRef(r gwapiv1.ParentReference) gwapiv1.ParentReference {
	r.Group, r.Kind, r.Namespace, r.SectionName = sharedPtr(r.Group), sharedPtr(r.Kind), sharedPtr(r.Namespace), sharedPtr(r.SectionName)
	r.Name = intern(r.Name)
	return r
}

func sharedParentRefs(refs []gwapiv1.ParentReference) []gwapiv1.ParentReference {
	if len(refs) == 0 {
		return refs
	}
	out := make([]gwapiv1.ParentReference, len(refs))
	for i, r := range refs {
		out[i] = sharedParentRef(r)
	}
	return out
}

func sharedBackendRefs(refs []gwapiv1.HTTPBackendRef) []gwapiv1.HTTPBackendRef {
	if len(refs) == 0 {
		return refs
	}
	out := make([]gwapiv1.HTTPBackendRef, len(refs))
	for i, r := range refs {
		o := &r.BackendObjectReference
		o.Group, o.Kind, o.Namespace = sharedPtr(o.Group), sharedPtr(o.Kind), sharedPtr(o.Namespace)
		out[i] = r
	}
	return out
}

// slimConditions copies the conditions keep accepts (all when keep is nil), their type,
// status, reason and message canonical (a fleet repeats them). Nil when none.
func slimConditions(conds []metav1.Condition, keep func(string) bool) []metav1.Condition {
	var out []metav1.Condition
	for _, c := range conds {
		if keep != nil && !keep(c.Type) {
			continue
		}
		c.Type, c.Status, c.Reason, c.Message = intern(c.Type), intern(c.Status), intern(c.Reason), intern(c.Message)
		out = append(out, c)
	}
	return out
}

// publisherCondition reports whether a TrafficMap condition type is one of the publisher's
// (Published, PublicationFallback): the only ones it reads, and the only ones its status
// writes set (statusWriter.apply).
func publisherCondition(typ string) bool {
	return typ == v1beta1.ConditionPublished || typ == v1beta1.ConditionPublicationFallback
}

// slimTrafficMap is the TrafficMap informer's transform. It keeps identity, version,
// lifecycle and finalizers (model.HasFinalizer); of the spec the service, the generation
// the table was built from and each entry's cluster, endpoint, weight and drain references
// (model.Compute); the whole publisher-owned status the status writes compare against
// (sourceUID, published, gatewayRef, observed generation, the claim journal and the
// Published and PublicationFallback conditions, in full). It drops managedFields, labels,
// annotations and owner references, the mode and each entry's health, capacity and probe,
// and the routing controller's conditions: nothing the publisher reads.
func slimTrafficMap(obj any) (any, error) {
	tm, ok := obj.(*v1beta1.TrafficMap)
	if !ok {
		return obj, nil
	}
	slim := &v1beta1.TrafficMap{TypeMeta: internTypeMeta(tm.TypeMeta), ObjectMeta: slimMeta(&tm.ObjectMeta)}
	slim.Spec = v1beta1.TrafficMapSpec{Service: tm.Spec.Service, ObservedISVCGeneration: tm.Spec.ObservedISVCGeneration}
	if slim.Spec.Service == slim.Name {
		slim.Spec.Service = slim.Name // one copy: spec.service is the map's name in v1beta1
	}
	if len(tm.Spec.Entries) > 0 {
		slim.Spec.Entries = make([]v1beta1.TrafficMapEntry, len(tm.Spec.Entries))
		for i, e := range tm.Spec.Entries {
			slim.Spec.Entries[i] = v1beta1.TrafficMapEntry{Cluster: intern(e.Cluster), Endpoint: e.Endpoint, Weight: e.Weight,
				DrainRefs: e.DrainRefs}
		}
	}
	st := tm.Status
	slim.Status = v1beta1.TrafficMapStatus{SourceUID: st.SourceUID, Published: st.Published,
		ObservedTrafficMapGeneration: st.ObservedTrafficMapGeneration, Publisher: slimJournal(st.Publisher),
		Conditions: slimConditions(st.Conditions, publisherCondition)}
	if ref := st.GatewayRef; ref != nil {
		slim.Status.GatewayRef = &v1beta1.TrafficMapGatewayRef{Group: intern(ref.Group), Kind: intern(ref.Kind), Name: ref.Name,
			Namespace: intern(ref.Namespace)}
	}
	return slim, nil
}

// slimJournal copies a claim journal, its publisher name and digests canonical (the maps of
// one publisher with the same options share them).
func slimJournal(j *v1beta1.TrafficMapPublisherStatus) *v1beta1.TrafficMapPublisherStatus {
	if j == nil {
		return nil
	}
	out := &v1beta1.TrafficMapPublisherStatus{PublisherName: intern(j.PublisherName), ClaimedTargets: j.ClaimedTargets,
		ObservedOptionsDigest: intern(j.ObservedOptionsDigest)}
	if lp := j.LastPositive; lp != nil {
		out.LastPositive = &v1beta1.TrafficMapPublisherLastPositive{TrafficMapGeneration: lp.TrafficMapGeneration,
			ObservedISVCGeneration: lp.ObservedISVCGeneration, PlanCompatibilityDigest: intern(lp.PlanCompatibilityDigest), Targets: lp.Targets}
	}
	return out
}

// slimSource is the InferenceService (metadata) informer's transform: it keeps identity,
// version and lifecycle and the annotations the publisher reads (model.ReadsSourceAnnotation:
// drains, ramps, tolerations, the global hostname). It drops managedFields, labels, owner
// references, finalizers and every other annotation (a kubectl last-applied configuration
// holds the whole spec).
func slimSource(obj any) (any, error) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil
	}
	meta := slimMeta(&m.ObjectMeta)
	meta.Finalizers = nil
	meta.Annotations = keepStrings(m.Annotations, model.ReadsSourceAnnotation)
	return &metav1.PartialObjectMetadata{TypeMeta: internTypeMeta(m.TypeMeta), ObjectMeta: meta}, nil
}
