package publish

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwinformersv1 "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions/apis/v1"

	ominformers "github.com/trafficmap/publisher/api/client/informers/externalversions/api/v1beta1"
	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/weights"
)

// Index names on the informers.
const (
	// indexByService and indexByRouteName are on TrafficMaps: namespace/spec.service and
	// namespace/route name. They leave out the maps mapsIndexed finds by key (keyedBy).
	indexByService   = "byService"
	indexByRouteName = "byRouteName"
	indexBySource    = "bySource" // on owned Services: their TrafficMap's namespace/name
	// indexByHostname is on TrafficMaps (their rendered --host-template and gRPC names), on
	// InferenceServices (their ome.io/global-host) and on foreign HTTPRoutes (their
	// hostnames), each name under hostIndexKeys.
	indexByHostname = "byHostname"
)

// caches are the publisher's informers, one set per watched namespace ("" = all), and the
// reads the pipeline makes from them. The informers are built in New and started in Run and
// never change afterwards, so reads need no lock, except the optional taint sources
// (sources, clusterSources: the taint source discovery sets and clears them while workers
// run, under their lock). The ownership lookups are owners (claimView, ownership.go).
// Objects read from the caches are never modified.
type caches struct {
	// route derives hostnames (the annotation, else the template) and says which foreign
	// routes contend with the publisher's.
	route httproute.Config
	// scoped: names compete only within a namespace (a Gateway per namespace and no xDS
	// sink); otherwise across every watched namespace.
	scoped bool
	scopes []string
	maps   []cache.SharedIndexInformer
	isvcs  []cache.SharedIndexInformer
	// routes and services are every route and the owned Services, with the HTTPRoute sink;
	// without it, only the routes and Services it wrote before (label-selected), which the
	// httproute.RetiringSink removes (routes empty when HTTPRoutes are not served).
	routes   []cache.SharedIndexInformer
	services []cache.SharedIndexInformer
	// records are the owned record ConfigMaps (recorded.go); empty when the HTTPRoute sink
	// is on, whose routes record the fallback state instead.
	records []cache.SharedIndexInformer

	// sources are the optional taint sources (taintsources.go).
	sources *clusterSources
	// owners answers who claims which name (ownership.go).
	owners claimView

	// meta reads an InferenceService past the cache (sourceVersion) and writes its ramp
	// annotation (writeRamps) as fieldManager.
	meta         metadata.Interface
	fieldManager string

	// publisher is the publisherName whose claim journals count (journal.go), publishers
	// the names it knows; policy says which namespace may claim which hostname
	// (model.ClaimPolicy); claimRecords are its claim records (claims.go), which grant the
	// journals' hostnames.
	publisher    string
	publishers   model.Publishers
	policy       model.ClaimPolicy
	claimRecords *claimRecords
	// adoptOME: the map's route written by OME's publisher is the map's own
	// (httproute.AdoptOME; Config.TakeOverFrom "gatewayapi").
	adoptOME bool
}

func newCaches(c clients, cfg Config, route httproute.Config) *caches {
	cs := &caches{scopes: cfg.Namespaces, route: route, meta: c.meta, fieldManager: cfg.FieldManager,
		publisher: cfg.publisherName(), publishers: cfg.publishers(), policy: cfg.claimPolicy(), adoptOME: cfg.adoptsFromOME(),
		claimRecords: newClaimRecords(c.meta, c.kube, cfg.ClaimNamespace, cfg.publisherName(), cfg.FieldManager),
		scoped:       !cfg.sinkOn(SinkXDS) && route.Gateway.Namespace == "",
		sources:      &clusterSources{live: &liveTaints{dyn: c.dyn}, discover: make(chan struct{}, 1)}}
	cs.owners = claimView{cs}
	if len(cs.scopes) == 0 {
		cs.scopes = []string{corev1.NamespaceAll}
	}
	// Only the TrafficMaps resync: a resync re-reconciles every map, which reads the other
	// caches; theirs would only enqueue the same maps again (80,000 Service events per
	// period at 10,000 maps). Their changes arrive as watch events.
	resync := cfg.ResyncPeriod
	managed := labels.SelectorFromSet(labels.Set{httproute.LabelManagedBy: httproute.ManagedByValue}).String()
	onlyManaged := func(o *metav1.ListOptions) { o.LabelSelector = managed }
	for _, ns := range cs.scopes {
		maps := ominformers.NewFilteredTrafficMapInformer(c.maps, ns, resync, cache.Indexers{
			indexByService:   indexTrafficMapByService,
			indexByRouteName: indexTrafficMapByRoute,
			indexByHostname:  cs.owners.indexTrafficMapByHostname,
		}, nil)
		isvcs := metadatainformer.NewFilteredMetadataInformer(c.meta, v1beta1.InferenceServicesResource, ns, 0,
			cache.Indexers{indexByHostname: indexInferenceServiceByHostname}, nil).Informer()
		_ = maps.SetTransform(cacheTransforms.trafficMap) // cannot fail before the informer runs
		_ = isvcs.SetTransform(cacheTransforms.source)    // cannot fail before the informer runs
		cs.maps = append(cs.maps, maps)
		cs.isvcs = append(cs.isvcs, isvcs)
		routesOf := func(*metav1.ListOptions) {} // every route: foreign ones contend for names
		if !cfg.sinkOn(SinkHTTPRoute) {
			records := coreinformers.NewFilteredConfigMapInformer(c.kube, ns, 0, cache.Indexers{}, onlyManaged)
			_ = records.SetTransform(dropManagedFields) // cannot fail before the informer runs
			cs.records = append(cs.records, records)
			routesOf = onlyManaged // only the disabled sink's, to retire (no foreign one contends)
		}
		routes := gwinformersv1.NewFilteredHTTPRouteInformer(c.gateway, ns, 0,
			cache.Indexers{indexByHostname: indexForeignRouteByHostname}, routesOf)
		services := coreinformers.NewFilteredServiceInformer(c.kube, ns, 0,
			cache.Indexers{indexBySource: indexServiceBySource}, onlyManaged)
		_ = routes.SetTransform(cacheTransforms.route) // cannot fail before the informer runs
		_ = services.SetTransform(cacheTransforms.service)
		cs.routes = append(cs.routes, routes)
		cs.services = append(cs.services, services)
	}
	return cs
}

// cacheTransforms are the transforms of the informers newCaches builds, by cached kind.
var cacheTransforms = struct {
	service, route, trafficMap, source cache.TransformFunc
}{service: slimService, route: slimRoute, trafficMap: slimTrafficMap, source: slimSource}

// dropManagedFields is the transform of the informers with no slim transform (slim.go): the
// publisher never reads metadata.managedFields, which is often the larger part of a cached
// object, so the caches do not keep it. It edits the freshly decoded object before it
// enters the cache.
func dropManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// informerFor returns the informer among infs (one per scope of scopes) that covers
// namespace, or nil.
func informerFor(scopes []string, infs []cache.SharedIndexInformer, namespace string) cache.SharedIndexInformer {
	if len(infs) == 0 { // a sink that is off has no informers
		return nil
	}
	for i, scope := range scopes {
		if scope == "" || scope == namespace {
			return infs[i]
		}
	}
	return nil
}

// cached returns the cached object at namespace/name as a T, or the zero T when absent.
func cached[T any](c *caches, infs []cache.SharedIndexInformer, namespace, name string) (T, error) {
	var zero T
	inf := informerFor(c.scopes, infs, namespace)
	if inf == nil {
		return zero, nil
	}
	obj, ok, err := inf.GetIndexer().GetByKey(model.Key(namespace, name).String())
	if err != nil || !ok {
		return zero, err
	}
	t, ok := obj.(T)
	if !ok {
		return zero, fmt.Errorf("cache holds %T at %s/%s", obj, namespace, name)
	}
	return t, nil
}

// watches reports whether namespace is in the scope of c (a TrafficMap informer covers it).
func watches(c *caches, namespace string) bool {
	return informerFor(c.scopes, c.maps, namespace) != nil
}

func (c *caches) trafficMap(namespace, name string) (*v1beta1.TrafficMap, error) {
	return cached[*v1beta1.TrafficMap](c, c.maps, namespace, name)
}

func (c *caches) inferenceService(namespace, name string) (*metav1.PartialObjectMetadata, error) {
	return cached[*metav1.PartialObjectMetadata](c, c.isvcs, namespace, name)
}

// sourceVersion reads the InferenceService namespace/name from the API server, not the
// cache, and returns its resourceVersion ("" when it does not exist).
func (c *caches) sourceVersion(ctx context.Context, namespace, name string) (string, error) {
	m, err := c.meta.Resource(v1beta1.InferenceServicesResource).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read inferenceservice %s/%s: %w", namespace, name, err)
	}
	return m.ResourceVersion, nil
}

// unconfirmed lists the namespace/name of every cached TrafficMap whose Published
// condition is not True at its generation (what this replica reports on).
func (c *caches) unconfirmed() []string {
	var out []string
	for _, inf := range c.maps {
		for _, obj := range inf.GetStore().List() {
			if tm, ok := obj.(*v1beta1.TrafficMap); ok && !model.PublishedTrue(tm) {
				out = append(out, model.KeyOf(tm).String())
			}
		}
	}
	return out
}

// mapCount counts the TrafficMaps cached by infs (one informer per scope).
func mapCount(infs []cache.SharedIndexInformer) int {
	n := 0
	for _, inf := range infs {
		n += len(inf.GetStore().ListKeys())
	}
	return n
}

// unpublished counts the cached TrafficMaps whose Published condition is not True at their
// generation, and how long ago the oldest False condition among them turned False. Maps
// that are ramping (reason Ramping) are counted by ramping instead: a ramp is slow on
// purpose.
func (c *caches) unpublished(now time.Time) (int, time.Duration) {
	n, oldest := 0, time.Duration(0)
	for _, inf := range c.maps {
		for _, obj := range inf.GetStore().List() {
			tm, ok := obj.(*v1beta1.TrafficMap)
			if !ok || model.PublishedTrue(tm) || model.Ramping(tm) {
				continue
			}
			n++
			if cond := model.FindPublished(tm); cond != nil && !cond.LastTransitionTime.IsZero() {
				oldest = max(oldest, now.Sub(cond.LastTransitionTime.Time))
			}
		}
	}
	return n, oldest
}

// ramping counts the TrafficMaps the informers maps cache whose Published condition says
// Ramping.
func ramping(maps []cache.SharedIndexInformer) int {
	n := 0
	for _, inf := range maps {
		for _, obj := range inf.GetStore().List() {
			if tm, ok := obj.(*v1beta1.TrafficMap); ok && model.Ramping(tm) {
				n++
			}
		}
	}
	return n
}

// countFallbacks counts the TrafficMaps the informers maps cache whose PublicationFallback
// condition is True, by reason (model.InFallback); a map being deleted is not counted.
func countFallbacks(maps []cache.SharedIndexInformer) map[model.FallbackReason]int {
	n := map[model.FallbackReason]int{}
	for _, inf := range maps {
		for _, obj := range inf.GetStore().List() {
			tm, ok := obj.(*v1beta1.TrafficMap)
			if !ok || tm.DeletionTimestamp != nil {
				continue
			}
			if r := model.InFallback(tm); r != "" {
				n[r]++
			}
		}
	}
	return n
}

// writeRamps sets the ramp annotation of the InferenceService namespace/name to value
// (removes it when value is ""), with a merge patch that the API server refuses with a
// conflict when the object is no longer at resourceVersion.
func (c *caches) writeRamps(ctx context.Context, namespace, name, resourceVersion, value string) error {
	var v any
	if value != "" {
		v = value
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": resourceVersion, "annotations": map[string]any{weights.RampAnnotation: v}}})
	if err != nil {
		return fmt.Errorf("encode ramp patch: %w", err)
	}
	_, err = c.meta.Resource(v1beta1.InferenceServicesResource).Namespace(namespace).Patch(ctx, name, types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: c.fieldManager})
	if err != nil {
		return fmt.Errorf("write annotation %s on inferenceservice %s/%s: %w", weights.RampAnnotation, namespace, name, err)
	}
	return nil
}

// keys lists the namespace/name of every cached TrafficMap.
func (c *caches) keys() []string {
	var out []string
	for _, inf := range c.maps {
		out = append(out, inf.GetStore().ListKeys()...)
	}
	return out
}

// mapsIndexed returns the cached TrafficMaps whose index holds value, in namespace, or in
// every watched namespace when namespace is "". For indexByService and indexByRouteName
// that includes the map the value names by key (keyedBy), which the index leaves out.
func (c *caches) mapsIndexed(index, namespace, value string) []*v1beta1.TrafficMap {
	infs := c.maps
	if namespace != "" {
		inf := informerFor(c.scopes, c.maps, namespace)
		if inf == nil {
			return nil
		}
		infs = []cache.SharedIndexInformer{inf}
	}
	key, byKey := keyOfIndexed(index, value)
	var out []*v1beta1.TrafficMap
	for _, inf := range infs {
		if byKey {
			if o, ok, err := inf.GetIndexer().GetByKey(key); err == nil && ok {
				if tm, ok := o.(*v1beta1.TrafficMap); ok && keyedBy(index, tm) {
					out = append(out, tm)
				}
			}
		}
		objs, err := inf.GetIndexer().ByIndex(index, value)
		if err != nil {
			continue
		}
		for _, o := range objs {
			if tm, ok := o.(*v1beta1.TrafficMap); ok {
				out = append(out, tm)
			}
		}
	}
	return out
}

// keyedBy reports whether tm is found by key for index instead of through it: its
// spec.service is its own name (always, in v1beta1), or its route name is its name with
// "-global" (httproute.RouteMapName). The index then holds nothing of it, which saves two
// one-key index sets per map.
func keyedBy(index string, tm *v1beta1.TrafficMap) bool {
	switch index {
	case indexByService:
		return tm.Spec.Service == tm.Name
	case indexByRouteName:
		name, ok := httproute.RouteMapName(httproute.RouteName(tm.Name))
		return ok && name == tm.Name
	}
	return false
}

// keyOfIndexed is the key of the map that value (namespace/name) of index names when that
// map is keyedBy index.
func keyOfIndexed(index, value string) (string, bool) {
	namespace, name, ok := strings.Cut(value, "/")
	if !ok {
		return "", false
	}
	switch index {
	case indexByService:
		return value, true
	case indexByRouteName:
		if mapName, ok := httproute.RouteMapName(name); ok {
			return model.Key(namespace, mapName).String(), true
		}
	}
	return "", false
}

// Route returns the cached route at namespace/name, or nil.
func (c *caches) Route(namespace, name string) (*gwapiv1.HTTPRoute, error) {
	return cached[*gwapiv1.HTTPRoute](c, c.routes, namespace, name)
}

// seen is inf's last synced resourceVersion, "" for none.
func seen(inf cache.SharedIndexInformer) string {
	if inf == nil {
		return ""
	}
	return inf.LastSyncResourceVersion()
}

// record returns the cached record ConfigMap at namespace/name, or nil.
func (c *caches) record(namespace, name string) (*corev1.ConfigMap, error) {
	return cached[*corev1.ConfigMap](c, c.records, namespace, name)
}

// sinkStore is the caches as the HTTPRoute sink reads them (httproute.Store).
type sinkStore struct{ c *caches }

var _ httproute.Store = sinkStore{}

// Route implements httproute.Store.
func (s sinkStore) Route(namespace, name string) (*gwapiv1.HTTPRoute, error) {
	return s.c.Route(namespace, name)
}

// RoutesSeen implements httproute.Store: the resourceVersion the route informer of
// namespace has received events up to ("" when there is none).
func (s sinkStore) RoutesSeen(namespace string) string {
	return seen(informerFor(s.c.scopes, s.c.routes, namespace))
}

// ServicesSeen implements httproute.Store, as RoutesSeen for the owned Services.
func (s sinkStore) ServicesSeen(namespace string) string {
	return seen(informerFor(s.c.scopes, s.c.services, namespace))
}

// Services implements httproute.Store: each cached Service (a cachedService) as a
// *corev1.Service built for this read.
func (s sinkStore) Services(src httproute.Source) ([]*corev1.Service, error) {
	c := s.c
	inf := informerFor(c.scopes, c.services, src.Namespace)
	if inf == nil {
		return nil, nil
	}
	objs, err := inf.GetIndexer().ByIndex(indexBySource, model.Key(src.Namespace, src.Name).String())
	if err != nil {
		return nil, fmt.Errorf("list cached services: %w", err)
	}
	var out []*corev1.Service
	for _, o := range objs {
		if cached, ok := o.(*cachedService); ok {
			if svc := cached.service(); httproute.Owned(svc.Labels, src) {
				out = append(out, svc)
			}
		}
	}
	return out, nil
}

// indexServiceBySource indexes an owned Service by its TrafficMap's namespace/name, so a
// reconcile reads its map's Services without scanning every Service of the namespace.
func indexServiceBySource(obj any) ([]string, error) {
	svc, ok := obj.(*cachedService)
	if !ok {
		return nil, nil
	}
	src, ok := httproute.SourceOf(svc.Labels())
	if !ok {
		return nil, nil
	}
	return []string{model.Key(src.Namespace, src.Name).String()}, nil
}

func indexTrafficMapByService(obj any) ([]string, error) {
	tm, ok := obj.(*v1beta1.TrafficMap)
	if !ok || keyedBy(indexByService, tm) {
		return nil, nil
	}
	return []string{model.Key(tm.Namespace, tm.Spec.Service).String()}, nil
}

func indexTrafficMapByRoute(obj any) ([]string, error) {
	tm, ok := obj.(*v1beta1.TrafficMap)
	if !ok || keyedBy(indexByRouteName, tm) {
		return nil, nil
	}
	return []string{model.Key(tm.Namespace, httproute.RouteName(tm.Name)).String()}, nil
}

// mapsWithCluster returns the TrafficMaps in maps (the informers of every watched namespace) with an entry
// for cluster. It reads every map: a cluster's taints change rarely, and every map of a fleet
// has an entry for most clusters, so an index by cluster (an entry per map and cluster, 80,000
// at 10,000 maps of 8 clusters) would cost more memory than the scan costs time.
func mapsWithCluster(maps []cache.SharedIndexInformer, cluster string) []*v1beta1.TrafficMap {
	var out []*v1beta1.TrafficMap
	for _, inf := range maps {
		for _, o := range inf.GetStore().List() {
			tm, ok := o.(*v1beta1.TrafficMap)
			if !ok {
				continue
			}
			if slices.ContainsFunc(tm.Spec.Entries, func(e v1beta1.TrafficMapEntry) bool { return e.Cluster == cluster }) {
				out = append(out, tm)
			}
		}
	}
	return out
}
