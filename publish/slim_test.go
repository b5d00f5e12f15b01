package publish

import (
	"maps"
	"slices"
	"sync/atomic"
	"testing"
	"time"
	"unique"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/tools/cache"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwfake "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned/fake"

	omefake "github.com/trafficmap/publisher/api/client/clientset/versioned/fake"
	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/weights"
)

// Each informer's transform keeps exactly what the publisher reads of its kind: the
// slimmed object equals the stored one with only the unread parts removed, the readers
// answer the same on both, the transform never edits its input, is idempotent, and passes
// a tombstone through untouched.
func TestSlimTransformsKeepWhatTheReadersRead(t *testing.T) {
	deleted := metav1.NewTime(time.Date(2026, 12, 4, 13, 0, 0, 0, time.UTC))
	tests := []struct {
		name      string
		transform cache.TransformFunc
		stored    func() runtime.Object // as the API server returns it, with unread parts
		want      func() any            // stored without what no reader reads
		same      func(t *testing.T, stored runtime.Object, slim any)
	}{
		{
			name: "Service", transform: slimService,
			stored: func() runtime.Object {
				svc := storedService(9)
				svc.DeletionTimestamp, svc.Finalizers = &deleted, []string{"f"}
				svc.Labels["team"] = "inference"
				svc.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{}"}
				svc.OwnerReferences[0].Controller = new(true)
				svc.Spec.ClusterIPs = []string{"10.0.0.1"}
				svc.Status.Conditions = []metav1.Condition{{Type: "x"}}
				return svc
			},
			want: func() any {
				svc := storedService(9)
				var labels []unique.Handle[string]
				for _, s := range []string{httproute.LabelManagedBy, httproute.ManagedByValue, httproute.LabelCluster, benchCluster(1),
					httproute.LabelSourceName, benchMapName(1), httproute.LabelSourceNamespace, "bench"} {
					labels = append(labels, unique.Make(s))
				}
				owner := svc.OwnerReferences[0]
				return &cachedService{name: svc.Name, namespace: svc.Namespace, uid: svc.UID, resourceVersion: svc.ResourceVersion,
					deletionTimestamp: &deleted, finalizers: []string{"f"}, labels: labels,
					owners: []unique.Handle[cachedOwner]{unique.Make(cachedOwner{APIVersion: owner.APIVersion, Kind: owner.Kind, Name: owner.Name, UID: owner.UID,
						controller: 2, blockDeletion: ownerBool(owner.BlockOwnerDeletion)})},
					serviceType: corev1.ServiceTypeExternalName, externalName: svc.Spec.ExternalName,
					ports: []unique.Handle[cachedPort]{unique.Make(cachedPort{Name: "https", Protocol: corev1.ProtocolTCP, Port: 443})}}
			},
			same: func(t *testing.T, stored runtime.Object, slim any) {
				s, l := stored.(*corev1.Service), slim.(*cachedService).service()
				accessed, err := meta.Accessor(slim)
				require.NoError(t, err)
				src, ok := httproute.SourceOf(accessed.GetLabels())
				require.True(t, ok, "the handlers read the labels through meta.Accessor")
				assert.Equal(t, benchMapName(1), src.Name)
				want := s.DeepCopy()
				want.Labels = map[string]string{}
				for k, v := range s.Labels {
					if k != "team" {
						want.Labels[k] = v
					}
				}
				want.CreationTimestamp, want.Generation = metav1.Time{}, 0 // no reader reads a Service's
				want.Annotations, want.ManagedFields, want.Spec, want.Status = nil, nil, corev1.ServiceSpec{Type: s.Spec.Type,
					ExternalName: s.Spec.ExternalName, Ports: []corev1.ServicePort{{Name: "https", Protocol: corev1.ProtocolTCP, Port: 443}}}, corev1.ServiceStatus{}
				assert.Equal(t, want, l, "read as the Service the writer compares")
				fromStored, _ := httproute.SourceOf(s.Labels)
				got, _ := httproute.SourceOf(l.Labels)
				assert.Equal(t, fromStored, got)
				assert.True(t, httproute.Owned(l.Labels, httproute.Source{Namespace: got.Namespace, Name: got.Name}))
			},
		},
		{
			name: "HTTPRoute", transform: slimRoute,
			stored: func() runtime.Object {
				route := storedRoute(3)
				route.Labels["team"] = "inference"
				route.Annotations["kubectl.kubernetes.io/last-applied-configuration"] = "{}"
				return route
			},
			want: func() any {
				route := storedRoute(3)
				route.ManagedFields = nil
				return route
			},
			same: func(t *testing.T, stored runtime.Object, slim any) {
				s, l := stored.(*gwapiv1.HTTPRoute), slim.(*gwapiv1.HTTPRoute)
				desired := s.DeepCopy()
				desired.Labels = httproute.OwnerLabels(httproute.Source{Namespace: "bench", Name: benchMapName(3)})
				desired.Annotations = map[string]string{httproute.AnnotationDrains: "{}", httproute.AnnotationTrafficMapGeneration: "1"}
				assert.True(t, httproute.Matches(desired, l), "the slim route still matches what the publisher wants")
				cfg := httproute.Config{Gateway: benchGateway}
				assert.Equal(t, cfg.Acceptance(s), cfg.Acceptance(l))
				assert.Equal(t, httproute.Recorded(s), httproute.Recorded(l))
			},
		},
		{
			name: "TrafficMap", transform: slimTrafficMap,
			stored: func() runtime.Object {
				tm := storedTrafficMap(5)
				tm.DeletionTimestamp = &deleted
				tm.Labels = map[string]string{"team": "inference"}
				tm.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{}"}
				tm.Spec.Entries[2].DrainRefs = []string{"d1"}
				return tm
			},
			want: func() any {
				tm := storedTrafficMap(5)
				tm.DeletionTimestamp = &deleted
				tm.ManagedFields, tm.OwnerReferences, tm.Spec.Mode = nil, nil, ""
				for i := range tm.Spec.Entries {
					tm.Spec.Entries[i] = v1beta1.TrafficMapEntry{Cluster: tm.Spec.Entries[i].Cluster, Endpoint: tm.Spec.Entries[i].Endpoint,
						Weight: tm.Spec.Entries[i].Weight}
				}
				tm.Spec.Entries[2].DrainRefs = []string{"d1"}
				tm.Status.Conditions = tm.Status.Conditions[3:] // Published, PublicationFallback
				return tm
			},
			same: func(t *testing.T, stored runtime.Object, slim any) {
				s, l := stored.(*v1beta1.TrafficMap), slim.(*v1beta1.TrafficMap)
				assert.Equal(t, model.FindPublished(s), model.FindPublished(l))
				assert.Equal(t, model.FindFallback(s), model.FindFallback(l))
				assert.Equal(t, model.PublishedTrue(s), model.PublishedTrue(l))
				assert.Equal(t, model.InFallback(s), model.InFallback(l))
				assert.Equal(t, model.HasFinalizer(s), model.HasFinalizer(l))
				assert.Equal(t, model.JournaledNames(s, testPublisher), model.JournaledNames(l, testPublisher))
				assert.Equal(t, model.HolderOf(s, model.Publishers{Self: testPublisher}), model.HolderOf(l, model.Publishers{Self: testPublisher}))
				drain := map[string]string{weights.DrainAnnotation: `{"d2":{"cluster":"worker-1","reason":"r"}}`}
				cs, errS := model.Compute(model.Inputs{TrafficMap: s, SourceAnnotations: drain})
				cl, errL := model.Compute(model.Inputs{TrafficMap: l, SourceAnnotations: drain})
				require.NoError(t, errS)
				require.NoError(t, errL)
				assert.Equal(t, cs, cl)
			},
		},
		{
			name: "InferenceService", transform: slimSource,
			stored: func() runtime.Object {
				m := storedSourceMeta(10) // with a drain annotation
				m.Annotations[weights.RampAnnotation] = "[]"
				m.Annotations[weights.TolerationsAnnotation] = "[]"
				m.Annotations[v1beta1.AnnotationGlobalHost] = "chat.example.com"
				return m
			},
			want: func() any {
				m := storedSourceMeta(10)
				m.Labels, m.Finalizers, m.ManagedFields = nil, nil, nil
				m.Annotations = map[string]string{weights.DrainAnnotation: m.Annotations[weights.DrainAnnotation],
					weights.RampAnnotation: "[]", weights.TolerationsAnnotation: "[]", v1beta1.AnnotationGlobalHost: "chat.example.com"}
				return m
			},
			same: func(t *testing.T, stored runtime.Object, slim any) {
				s, l := stored.(*metav1.PartialObjectMetadata), slim.(*metav1.PartialObjectMetadata)
				for _, k := range []string{weights.DrainAnnotation, weights.RampAnnotation, weights.TolerationsAnnotation, v1beta1.AnnotationGlobalHost} {
					assert.Equal(t, s.Annotations[k], l.Annotations[k], k)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stored := tc.stored()
			input := stored.DeepCopyObject()
			got, err := tc.transform(input)
			require.NoError(t, err)
			assert.Equal(t, stored, input, "the transform does not edit its input")
			assert.Equal(t, tc.want(), got)
			tc.same(t, stored, got)

			again, err := tc.transform(got)
			require.NoError(t, err)
			assert.Equal(t, got, again, "idempotent")

			tomb := cache.DeletedFinalStateUnknown{Key: "bench/x", Obj: stored}
			passed, err := tc.transform(tomb)
			require.NoError(t, err)
			assert.Equal(t, tomb, passed, "a tombstone passes through")
			assert.Equal(t, tc.stored(), tomb.Obj, "and is not edited")
		})
	}
}

// The transforms share one copy of each repeated string between the objects they keep.
func TestSlimTransformsShareRepeatedStrings(t *testing.T) {
	a, err := slimService(storedService(0))
	require.NoError(t, err)
	b, err := slimService(storedService(1)) // the same map, another cluster
	require.NoError(t, err)
	sa, sb := a.(*cachedService), b.(*cachedService)
	assert.Same(t, unsafeStringData(sa.namespace), unsafeStringData(sb.namespace))
	assert.Equal(t, sa.owners[0], sb.owners[0], "a map's Services share one owner reference")
	require.Equal(t, httproute.LabelSourceName, sa.labels[4].Value())
	assert.Equal(t, sa.labels[5], sb.labels[5])
	assert.Same(t, unsafeStringData(sa.labels[5].Value()), unsafeStringData(sb.labels[5].Value()))
	assert.Equal(t, sa.ports[0], sb.ports[0])
	x, err := slimTrafficMap(storedTrafficMap(1))
	require.NoError(t, err)
	y, err := slimTrafficMap(storedTrafficMap(2))
	require.NoError(t, err)
	tx, ty := x.(*v1beta1.TrafficMap), y.(*v1beta1.TrafficMap)
	assert.Same(t, unsafeStringData(tx.Spec.Entries[4].Cluster), unsafeStringData(ty.Spec.Entries[4].Cluster))
	assert.Same(t, unsafeStringData(tx.Spec.Service), unsafeStringData(tx.Name), "spec.service is the map's name")
	r1, err := slimRoute(storedRoute(1))
	require.NoError(t, err)
	r2, err := slimRoute(storedRoute(2))
	require.NoError(t, err)
	b1, b2 := r1.(*gwapiv1.HTTPRoute).Spec.Rules[0].BackendRefs, r2.(*gwapiv1.HTTPRoute).Spec.Rules[0].BackendRefs
	assert.Same(t, b1[0].Kind, b2[3].Kind, "the routes share one pointer per kind")
	assert.Same(t, b1[0].Group, b2[3].Group)
	assert.Same(t, r1.(*gwapiv1.HTTPRoute).Spec.ParentRefs[0].Namespace, r2.(*gwapiv1.HTTPRoute).Status.Parents[0].ParentRef.Namespace)
}

var (
	benchGateway = types.NamespacedName{Namespace: "infra", Name: "global"}
)

func unsafeStringData(s string) *byte { return unsafe.StringData(s) }

// The Service informer newCaches builds holds cachedServices, indexed by their map, and
// its reads hand each out as the Service the writer compares, until it is deleted.
func TestServiceCacheHoldsSlimServices(t *testing.T) {
	stored := storedService(3)
	kube := kubefake.NewClientset(stored.DeepCopy())
	c := clients{kube: kube, gateway: gwfake.NewClientset(), maps: omefake.NewClientset(),
		meta: metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())}
	cs := newCaches(c, Config{Sinks: []string{SinkHTTPRoute, SinkXDS}, FieldManager: testPublisher}, httproute.Config{Gateway: benchGateway})
	ctx := t.Context()
	go cs.services[0].RunWithContext(ctx)
	require.True(t, cache.WaitForCacheSync(ctx.Done(), cs.services[0].HasSynced))

	objs := cs.services[0].GetStore().List()
	require.Len(t, objs, 1)
	assert.IsType(t, &cachedService{}, objs[0])
	src := httproute.Source{Namespace: "bench", Name: benchMapName(0)}
	got, err := sinkStore{cs}.Services(src)
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, stored.Name, got[0].Name)
	assert.Equal(t, stored.UID, got[0].UID)
	assert.Equal(t, stored.ResourceVersion, got[0].ResourceVersion)
	assert.Equal(t, stored.OwnerReferences, got[0].OwnerReferences)
	assert.Equal(t, stored.Spec.ExternalName, got[0].Spec.ExternalName)
	other, err := sinkStore{cs}.Services(httproute.Source{Namespace: "bench", Name: benchMapName(1)})
	require.NoError(t, err)
	assert.Empty(t, other)

	require.NoError(t, kube.CoreV1().Services("bench").Delete(ctx, stored.Name, metav1.DeleteOptions{}))
	require.Eventually(t, func() bool {
		got, err := sinkStore{cs}.Services(src)
		return err == nil && len(got) == 0
	}, 10*time.Second, 10*time.Millisecond)
}

// Only the TrafficMap informer resyncs: a resync re-reconciles every map, so a resync of
// the Services (or routes, or InferenceServices) would only enqueue the same maps again.
func TestOnlyTrafficMapsResync(t *testing.T) {
	svc := storedService(3)
	tm := storedTrafficMap(0)
	kube := kubefake.NewClientset(svc.DeepCopy())
	c := clients{kube: kube, gateway: gwfake.NewClientset(storedRoute(0)), maps: omefake.NewClientset(tm.DeepCopy()),
		meta: metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())}
	cs := newCaches(c, Config{Sinks: []string{SinkHTTPRoute, SinkXDS}, FieldManager: testPublisher, ResyncPeriod: 20 * time.Millisecond},
		httproute.Config{Gateway: benchGateway})
	var mapUpdates, serviceUpdates, routeUpdates atomic.Int64
	count := func(n *atomic.Int64) cache.ResourceEventHandler {
		return cache.ResourceEventHandlerFuncs{UpdateFunc: func(any, any) { n.Add(1) }}
	}
	_, err := cs.maps[0].AddEventHandler(count(&mapUpdates))
	require.NoError(t, err)
	_, err = cs.services[0].AddEventHandler(count(&serviceUpdates))
	require.NoError(t, err)
	_, err = cs.routes[0].AddEventHandler(count(&routeUpdates))
	require.NoError(t, err)
	ctx := t.Context()
	for _, inf := range []cache.SharedIndexInformer{cs.maps[0], cs.services[0], cs.routes[0]} {
		go inf.RunWithContext(ctx)
		require.True(t, cache.WaitForCacheSync(ctx.Done(), inf.HasSynced))
	}
	require.Eventually(t, func() bool { return mapUpdates.Load() >= 3 }, 10*time.Second, 5*time.Millisecond, "the maps resync")
	assert.Zero(t, serviceUpdates.Load(), "the Services do not")
	assert.Zero(t, routeUpdates.Load(), "the routes do not")
}

// Each informer keeps only the indexes a lookup reads: no namespace index (an entry per
// object, 80,000 for the Services of 10,000 maps; every informer watches one namespace or
// all, and no lookup lists a namespace).
func TestInformersKeepOnlyTheIndexesLookupsRead(t *testing.T) {
	indexes := func(infs []cache.SharedIndexInformer) []string {
		require.Len(t, infs, 1)
		return slices.Sorted(maps.Keys(infs[0].GetIndexer().GetIndexers()))
	}
	cs := benchCaches()
	assert.Equal(t, []string{indexByHostname, indexByRouteName, indexByService}, indexes(cs.maps))
	assert.Equal(t, []string{indexByHostname}, indexes(cs.isvcs))
	assert.Equal(t, []string{indexByHostname}, indexes(cs.routes))
	assert.Equal(t, []string{indexBySource}, indexes(cs.services))
	c := clients{kube: kubefake.NewClientset(), gateway: gwfake.NewClientset(), maps: omefake.NewClientset(),
		meta: metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())}
	records := newCaches(c, Config{Sinks: []string{SinkXDS}, FieldManager: testPublisher}, httproute.Config{Gateway: benchGateway}).records
	assert.Empty(t, indexes(records))
}
