package publish

import (
	"bytes"
	"encoding/json"
	"fmt"
	goruntime "runtime"
	"testing"
	"text/template"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	kubefake "k8s.io/client-go/kubernetes/fake"
	kubescheme "k8s.io/client-go/kubernetes/scheme"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/tools/cache"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwfake "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned/fake"
	gwscheme "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned/scheme"

	omefake "github.com/trafficmap/publisher/api/client/clientset/versioned/fake"
	omescheme "github.com/trafficmap/publisher/api/client/clientset/versioned/scheme"
	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/model"
)

// cacheClusters is the number of clusters (entries, backend Services) per map in the
// realistic objects of BenchmarkCacheRetained, as in the fleet benchmark.
const cacheClusters = 8

// cacheKind is one informer cache of the publisher: how to build the wire bytes of its i-th
// realistic object, how the informer decodes them, which transform it runs, and its
// informer (with the real indexers) in a fresh caches.
type cacheKind struct {
	name      string
	encode    func(i int) []byte
	decode    func(b []byte) (any, error)
	transform cache.TransformFunc
	informer  func(cs *caches) cache.SharedIndexInformer
}

// BenchmarkCacheRetained fills each informer's real indexer (newCaches, with its indexers)
// through the informer's transform with n realistic objects decoded from wire bytes the way
// the informer decodes them (protobuf for Services and InferenceService metadata, JSON for
// TrafficMaps and HTTPRoutes), and reports the heap the filled cache retains per object
// (retained-B/obj: live heap after a GC, minus before).
func BenchmarkCacheRetained(b *testing.B) {
	const n = 4000
	for _, k := range cacheKinds() {
		b.Run(k.name, func(b *testing.B) {
			wire := make([][]byte, n)
			for i := range wire {
				wire[i] = k.encode(i)
			}
			var total uint64
			for b.Loop() {
				total += retained(b, k, wire)
			}
			b.ReportMetric(float64(total)/float64(b.N)/n, "retained-B/obj")
		})
	}
}

// retained fills a fresh cache of kind k with the objects in wire and returns the bytes of
// live heap it holds afterwards.
func retained(b *testing.B, k cacheKind, wire [][]byte) uint64 {
	b.Helper()
	inf := k.informer(benchCaches())
	var before, after goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&before)
	store := inf.GetIndexer()
	for _, w := range wire {
		obj, err := k.decode(w)
		require.NoError(b, err)
		obj, err = k.transform(obj)
		require.NoError(b, err)
		require.NoError(b, store.Add(obj))
	}
	goruntime.GC()
	goruntime.ReadMemStats(&after)
	goruntime.KeepAlive(store)
	if after.HeapAlloc < before.HeapAlloc {
		return 0
	}
	return after.HeapAlloc - before.HeapAlloc
}

// benchCaches are the publisher's informers with both sinks on, not started.
func benchCaches() *caches {
	route := httproute.Config{Gateway: types.NamespacedName{Namespace: "infra", Name: "global"},
		HostTemplate: template.Must(template.New("h").Parse("{{.Service}}.{{.Namespace}}.example.com"))}
	meta := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	c := clients{kube: kubefake.NewClientset(), gateway: gwfake.NewClientset(), maps: omefake.NewClientset(), meta: meta}
	return newCaches(c, Config{Sinks: []string{SinkHTTPRoute, SinkXDS}, FieldManager: testPublisher}, route)
}

func cacheKinds() []cacheKind {
	kubePB := protobuf.NewSerializer(kubescheme.Scheme, kubescheme.Scheme)
	kubeDecoder := kubescheme.Codecs.UniversalDeserializer()
	metaScheme := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(metaScheme); err != nil {
		panic(err)
	}
	metaPB := protobuf.NewSerializer(metaScheme, metaScheme)
	metaDecoder := serializer.NewCodecFactory(metaScheme).UniversalDeserializer()
	decodeWith := func(d runtime.Decoder) func([]byte) (any, error) {
		return func(b []byte) (any, error) { obj, _, err := d.Decode(b, nil, nil); return obj, err }
	}
	encodePB := func(s *protobuf.Serializer, obj runtime.Object) []byte {
		var buf bytes.Buffer
		if err := s.Encode(obj, &buf); err != nil {
			panic(err)
		}
		return buf.Bytes()
	}
	encodeJSON := func(obj any) []byte {
		out, err := json.Marshal(obj)
		if err != nil {
			panic(err)
		}
		return out
	}
	return []cacheKind{
		{name: "Service", encode: func(i int) []byte { return encodePB(kubePB, storedService(i)) },
			decode: decodeWith(kubeDecoder), transform: cacheTransforms.service,
			informer: func(cs *caches) cache.SharedIndexInformer { return cs.services[0] }},
		{name: "HTTPRoute", encode: func(i int) []byte { return encodeJSON(storedRoute(i)) },
			decode: decodeWith(gwscheme.Codecs.UniversalDeserializer()), transform: cacheTransforms.route,
			informer: func(cs *caches) cache.SharedIndexInformer { return cs.routes[0] }},
		{name: "TrafficMap", encode: func(i int) []byte { return encodeJSON(storedTrafficMap(i)) },
			decode: decodeWith(omescheme.Codecs.UniversalDeserializer()), transform: cacheTransforms.trafficMap,
			informer: func(cs *caches) cache.SharedIndexInformer { return cs.maps[0] }},
		{name: "InferenceService", encode: func(i int) []byte { return encodePB(metaPB, storedSourceMeta(i)) },
			decode: decodeWith(metaDecoder), transform: cacheTransforms.source,
			informer: func(cs *caches) cache.SharedIndexInformer { return cs.isvcs[0] }},
	}
}

// Realistic stored objects of map i, as the API server returns them: with the fields the
// API server sets (uid, resourceVersion, creation time, defaults, managedFields) and the
// status other controllers write.

var (
	benchCreated = metav1.NewTime(time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC))
	benchDigest  = "sha256:" + fmt.Sprintf("%064x", 42)
)

func benchMapName(i int) string { return fmt.Sprintf("svc-%05d", i) }
func benchCluster(j int) string { return fmt.Sprintf("worker-%d", j) }
func benchUID(kind string, i int) types.UID {
	return types.UID(fmt.Sprintf("%08x-%04x-4000-8000-%012x", i, len(kind), i*31+len(kind)))
}

func benchEndpoint(i, j int) string {
	return fmt.Sprintf("https://%s.%s.example.com", benchMapName(i), benchCluster(j))
}

func managed(manager string, op metav1.ManagedFieldsOperationType, subresource, fields string) metav1.ManagedFieldsEntry {
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: op, APIVersion: "v1", Time: &benchCreated,
		FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(fields), Subresource: subresource}
}

func storedMeta(kind, name string, i int) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: "bench", UID: benchUID(kind, i), ResourceVersion: fmt.Sprint(100000 + i),
		Generation: 1, CreationTimestamp: benchCreated}
}

func ownerLabelsOf(i int) map[string]string {
	return map[string]string{httproute.LabelManagedBy: httproute.ManagedByValue,
		httproute.LabelSourceNamespace: "bench", httproute.LabelSourceName: benchMapName(i)}
}

func mapOwnerRef(i int) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: httproute.OwnerAPIVersion, Kind: httproute.OwnerKind,
		Name: benchMapName(i), UID: benchUID("TrafficMap", i)}}
}

// storedService is backend Service i: cluster i%8 of map i/8, as the publisher applies it.
func storedService(i int) *corev1.Service {
	m, j := i/cacheClusters, i%cacheClusters
	labels := ownerLabelsOf(m)
	labels[httproute.LabelCluster] = benchCluster(j)
	om := storedMeta("Service", httproute.ServiceName("bench", benchMapName(m), benchCluster(j)), i)
	om.Generation = 0
	om.Labels, om.OwnerReferences = labels, mapOwnerRef(m)
	om.ManagedFields = []metav1.ManagedFieldsEntry{managed(testPublisher, metav1.ManagedFieldsOperationApply, "",
		`{"f:metadata":{"f:labels":{"f:app.kubernetes.io/managed-by":{},"f:publisher.trafficmap.dev/cluster":{},`+
			`"f:publisher.trafficmap.dev/source-name":{},"f:publisher.trafficmap.dev/source-namespace":{}},`+
			`"f:ownerReferences":{"k:{\"uid\":\"`+string(benchUID("TrafficMap", m))+`\"}":{}}},`+
			`"f:spec":{"f:externalName":{},"f:ports":{"k:{\"port\":443,\"protocol\":\"TCP\"}":{".":{},"f:name":{},"f:port":{},"f:protocol":{}}},"f:type":{}}}`)}
	return &corev1.Service{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}, ObjectMeta: om,
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: fmt.Sprintf("%s.%s.example.com", benchMapName(m), benchCluster(j)),
			SessionAffinity: corev1.ServiceAffinityNone,
			Ports:           []corev1.ServicePort{{Name: "https", Protocol: corev1.ProtocolTCP, Port: 443, TargetPort: intstr.FromInt32(443)}}}}
}

// storedRoute is map i's HTTPRoute as the publisher applies it and the gateway accepts it.
func storedRoute(i int) *gwapiv1.HTTPRoute {
	name := benchMapName(i)
	om := storedMeta("HTTPRoute", httproute.RouteName(name), i)
	om.Labels, om.OwnerReferences = ownerLabelsOf(i), mapOwnerRef(i)
	om.Annotations = map[string]string{httproute.AnnotationDrains: "{}", httproute.AnnotationTrafficMapGeneration: "1",
		httproute.AnnotationClusterTaints: "{}", httproute.AnnotationServiceTolerations: "[]"}
	om.ManagedFields = []metav1.ManagedFieldsEntry{
		managed(testPublisher, metav1.ManagedFieldsOperationApply, "", `{"f:metadata":{"f:annotations":{"f:publisher.trafficmap.dev/drains":{},`+
			`"f:publisher.trafficmap.dev/trafficmap-generation":{}},"f:labels":{"f:app.kubernetes.io/managed-by":{},`+
			`"f:publisher.trafficmap.dev/source-name":{},"f:publisher.trafficmap.dev/source-namespace":{}}},`+
			`"f:spec":{"f:hostnames":{},"f:parentRefs":{},"f:rules":{}}}`),
		managed("gateway-controller", metav1.ManagedFieldsOperationUpdate, "status", `{"f:status":{".":{},"f:parents":{}}}`),
	}
	var refs []gwapiv1.HTTPBackendRef
	for j := range cacheClusters {
		refs = append(refs, gwapiv1.HTTPBackendRef{BackendRef: gwapiv1.BackendRef{
			BackendObjectReference: gwapiv1.BackendObjectReference{Group: ptrTo(gwapiv1.Group("")), Kind: ptrTo(gwapiv1.Kind("Service")),
				Name: gwapiv1.ObjectName(httproute.ServiceName("bench", name, benchCluster(j))), Port: ptrTo(gwapiv1.PortNumber(443))},
			Weight: ptrTo(int32(10))}})
	}
	parent := gwapiv1.ParentReference{Group: ptrTo(gwapiv1.Group(gwapiv1.GroupName)), Kind: ptrTo(gwapiv1.Kind("Gateway")),
		Namespace: ptrTo(gwapiv1.Namespace("infra")), Name: "global"}
	cond := func(t, reason, msg string) metav1.Condition {
		return metav1.Condition{Type: t, Status: metav1.ConditionTrue, Reason: reason, Message: msg, ObservedGeneration: 1, LastTransitionTime: benchCreated}
	}
	return &gwapiv1.HTTPRoute{TypeMeta: metav1.TypeMeta{APIVersion: gwapiv1.GroupVersion.String(), Kind: "HTTPRoute"}, ObjectMeta: om,
		Spec: gwapiv1.HTTPRouteSpec{CommonRouteSpec: gwapiv1.CommonRouteSpec{ParentRefs: []gwapiv1.ParentReference{parent}},
			Hostnames: []gwapiv1.Hostname{gwapiv1.Hostname(name + ".bench.example.com")},
			Rules: []gwapiv1.HTTPRouteRule{{Matches: []gwapiv1.HTTPRouteMatch{{Path: &gwapiv1.HTTPPathMatch{
				Type: ptrTo(gwapiv1.PathMatchPathPrefix), Value: ptrTo("/")}}}, BackendRefs: refs}}},
		Status: gwapiv1.HTTPRouteStatus{RouteStatus: gwapiv1.RouteStatus{Parents: []gwapiv1.RouteParentStatus{{
			ParentRef: parent, ControllerName: "gateway.example.com/controller",
			Conditions: []metav1.Condition{cond("Accepted", "Accepted", "Route is accepted"),
				cond("ResolvedRefs", "ResolvedRefs", "Resolved all the Object references for the Route")}}}}}}
}

// storedTrafficMap is map i as OME's routing controller writes it and the publisher has
// published it (finalizer, claim journal, conditions).
func storedTrafficMap(i int) *v1beta1.TrafficMap {
	name := benchMapName(i)
	om := storedMeta("TrafficMap", name, i)
	om.Finalizers = []string{model.Finalizer}
	om.OwnerReferences = []metav1.OwnerReference{{APIVersion: "ome.io/v1beta1", Kind: "InferenceService", Name: name,
		UID: benchUID("InferenceService", i), Controller: ptrTo(true), BlockOwnerDeletion: ptrTo(true)}}
	om.ManagedFields = []metav1.ManagedFieldsEntry{
		managed(v1beta1.RoutingFieldManager, metav1.ManagedFieldsOperationApply, "", `{"f:metadata":{"f:ownerReferences":{}},"f:spec":{"f:entries":{},"f:mode":{},"f:observedISVCGeneration":{},"f:service":{}}}`),
		managed(v1beta1.RoutingFieldManager, metav1.ManagedFieldsOperationApply, "status", `{"f:status":{"f:conditions":{},"f:sourceUID":{}}}`),
		managed(testPublisher, metav1.ManagedFieldsOperationApply, "", `{"f:metadata":{"f:finalizers":{"v:\"ome.io/trafficmap-publisher\"":{}}}}`),
		managed(testPublisher, metav1.ManagedFieldsOperationApply, "status", `{"f:status":{"f:conditions":{},"f:gatewayRef":{},"f:observedTrafficMapGeneration":{},"f:published":{},"f:publisher":{}}}`),
	}
	factor := resource.MustParse("1")
	entries := make([]v1beta1.TrafficMapEntry, cacheClusters)
	targets := make([]v1beta1.TrafficMapPublisherTarget, cacheClusters)
	probed := metav1.NewTime(benchCreated.Add(time.Minute))
	for j := range entries {
		entries[j] = v1beta1.TrafficMapEntry{Cluster: benchCluster(j), Endpoint: benchEndpoint(i, j), Weight: 10, Healthy: true,
			Capacity: &v1beta1.TrafficMapCapacity{Allocated: 4, Ready: 4, Factor: &factor, Source: v1beta1.CapacitySourceControlPlane},
			Probe:    &v1beta1.TrafficMapProbe{PolicyDigest: benchDigest, Result: v1beta1.ProbeResultPassing, LastProbeTime: &probed}}
		targets[j] = v1beta1.TrafficMapPublisherTarget{Target: benchCluster(j) + "=" + benchEndpoint(i, j), Weight: 10}
	}
	cond := func(t, reason, msg string) metav1.Condition {
		return metav1.Condition{Type: t, Status: metav1.ConditionTrue, Reason: reason, Message: msg, ObservedGeneration: 1, LastTransitionTime: benchCreated}
	}
	return &v1beta1.TrafficMap{TypeMeta: metav1.TypeMeta{APIVersion: v1beta1.SchemeGroupVersion.String(), Kind: "TrafficMap"}, ObjectMeta: om,
		Spec: v1beta1.TrafficMapSpec{Service: name, Mode: v1beta1.PlacementModeAll, Entries: entries, ObservedISVCGeneration: 1},
		Status: v1beta1.TrafficMapStatus{SourceUID: benchUID("InferenceService", i), Published: true, ObservedTrafficMapGeneration: 1,
			GatewayRef: &v1beta1.TrafficMapGatewayRef{Group: gwapiv1.GroupName, Kind: "HTTPRoute", Name: httproute.RouteName(name)},
			Publisher: &v1beta1.TrafficMapPublisherStatus{PublisherName: testPublisher, ClaimedTargets: []string{name + ".bench.example.com"},
				ObservedOptionsDigest: benchDigest, LastPositive: &v1beta1.TrafficMapPublisherLastPositive{TrafficMapGeneration: 1,
					ObservedISVCGeneration: 1, PlanCompatibilityDigest: benchDigest, Targets: targets}},
			Conditions: []metav1.Condition{
				cond(v1beta1.ConditionRoutable, "Routable", "8 of 8 homes have a positive weight"),
				{Type: v1beta1.ConditionOverrideActive, Status: metav1.ConditionFalse, Reason: "NoOverride", Message: "no drain override is active", ObservedGeneration: 1, LastTransitionTime: benchCreated},
				{Type: v1beta1.ConditionCapacityFallback, Status: metav1.ConditionFalse, Reason: "ControlPlane", Message: "control-plane capacity in use", ObservedGeneration: 1, LastTransitionTime: benchCreated},
				cond(v1beta1.ConditionPublished, string(model.ReasonPublished), "route bench/"+httproute.RouteName(name)+" generation 1 accepted by gateway infra/global; 8 backends"),
				{Type: v1beta1.ConditionPublicationFallback, Status: metav1.ConditionFalse, Reason: "Current", Message: "the current plan is published", ObservedGeneration: 1, LastTransitionTime: benchCreated},
			}}}
}

// storedSourceMeta is InferenceService i's metadata as the metadata informer lists it: an
// object created with kubectl apply (its last-applied annotation), with a drain annotation
// on every tenth.
func storedSourceMeta(i int) *metav1.PartialObjectMetadata {
	name := benchMapName(i)
	om := storedMeta("InferenceService", name, i)
	om.Labels = map[string]string{"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "ome"}
	om.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": fmt.Sprintf(
		`{"apiVersion":"ome.io/v1beta1","kind":"InferenceService","metadata":{"annotations":{},"name":%q,"namespace":"bench"},`+
			`"spec":{"engine":{"minReplicas":1,"maxReplicas":4},"model":{"name":"llama-3-8b-instruct"},"placement":{"mode":"All","clusterSelector":{}}}}`, name)}
	if i%10 == 0 {
		om.Annotations["ome.io/traffic-drain"] = `{"d1":{"cluster":"worker-1","reason":"maintenance"}}`
	}
	om.Finalizers = []string{"ome.io/inferenceservice-finalizer"}
	om.ManagedFields = []metav1.ManagedFieldsEntry{
		managed("kubectl-client-side-apply", metav1.ManagedFieldsOperationUpdate, "", `{"f:metadata":{"f:annotations":{".":{},"f:kubectl.kubernetes.io/last-applied-configuration":{}},"f:labels":{}},"f:spec":{".":{},"f:engine":{},"f:model":{},"f:placement":{}}}`),
		managed("ome-manager", metav1.ManagedFieldsOperationUpdate, "status", `{"f:status":{".":{},"f:conditions":{},"f:placement":{},"f:url":{}}}`),
	}
	return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"}, ObjectMeta: om}
}
