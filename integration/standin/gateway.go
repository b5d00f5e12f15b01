package standin

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	gwinformers "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions"
)

// ControllerName is the controllerName the stand-in gateway reports under.
const ControllerName = "example.com/stand-in-gateway"

// ClassName is the GatewayClass the stand-in gateway serves.
const ClassName = "stand-in"

// Gateway is the stand-in gateway controller for one Gateway: Accepted=True, and
// ResolvedRefs=True only when every backendRef Service exists (a ref of another kind, such as
// Envoy Gateway's Backend, is not looked up) (False/BackendNotFound
// otherwise), both at the route's metadata.generation. Paused, it reports nothing, like a
// controller that is behind; a route it was told to Reject it reports Accepted=False.
type Gateway struct {
	Namespace, Name string
	kube            kubernetes.Interface
	gw              gwclient.Interface
	logf            func(format string, args ...any)
	paused          atomic.Bool
	rejected        sync.Map // cache.ObjectName of each route Reject made it refuse
	infs            []cache.SharedIndexInformer
	// routes and services are the informer caches per watched namespace; a report reads
	// them first, as a gateway controller does, and reads through the API only on a miss
	// or a conflict.
	routes, services map[string]cache.SharedIndexInformer
	queue            workqueue.TypedRateLimitingInterface[cache.ObjectName]
	ctx              context.Context
}

// Option tunes a stand-in gateway.
type Option func(*options)

type options struct {
	workers         int
	routeNamespaces []string
}

// WithWorkers sets how many routes the stand-in reports on at once (default 1); gateway
// controllers at fleet scale write route status from several workers.
func WithWorkers(n int) Option { return func(o *options) { o.workers = max(n, 1) } }

// WithRouteNamespaces makes the stand-in report on the routes in these namespaces that name
// the Gateway (as a listener allowing routes from them would), instead of the routes in the
// Gateway's own namespace.
func WithRouteNamespaces(ns ...string) Option {
	return func(o *options) { o.routeNamespaces = append(o.routeNamespaces, ns...) }
}

// StartGateway creates the stand-in GatewayClass (if missing) and the Gateway ns/name, and
// reports route status until ctx is done. logf receives errors worth a look.
func StartGateway(ctx context.Context, kube kubernetes.Interface, gw gwclient.Interface, ns, name string, logf func(string, ...any), opts ...Option) (*Gateway, error) {
	o := options{workers: 1}
	for _, opt := range opts {
		opt(&o)
	}
	_, err := gw.GatewayV1().GatewayClasses().Create(ctx, &gwapiv1.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{Name: ClassName},
		Spec:       gwapiv1.GatewayClassSpec{ControllerName: ControllerName},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create gatewayclass %s: %w", ClassName, err)
	}
	_, err = gw.GatewayV1().Gateways(ns).Create(ctx, &gwapiv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: gwapiv1.GatewaySpec{
			GatewayClassName: ClassName,
			Listeners:        []gwapiv1.Listener{{Name: "http", Port: 80, Protocol: gwapiv1.HTTPProtocolType}},
		},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create gateway %s/%s: %w", ns, name, err)
	}

	g := &Gateway{Namespace: ns, Name: name, kube: kube, gw: gw, logf: logf, ctx: ctx,
		routes: map[string]cache.SharedIndexInformer{}, services: map[string]cache.SharedIndexInformer{},
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[cache.ObjectName](5*time.Millisecond, time.Second))}
	watched := o.routeNamespaces
	if len(watched) == 0 {
		watched = []string{ns}
	}
	for _, routeNS := range watched {
		inf := gwinformers.NewSharedInformerFactoryWithOptions(gw, 0, gwinformers.WithNamespace(routeNS)).Gateway().V1().HTTPRoutes().Informer()
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    g.enqueue,
			UpdateFunc: func(_, obj any) { g.enqueue(obj) },
		})
		svcs := kubeinformers.NewSharedInformerFactoryWithOptions(kube, 0, kubeinformers.WithNamespace(routeNS)).Core().V1().Services().Informer()
		go inf.RunWithContext(ctx)
		go svcs.RunWithContext(ctx)
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced, svcs.HasSynced) {
			return nil, fmt.Errorf("stand-in gateway cache: %w", ctx.Err())
		}
		g.infs = append(g.infs, inf)
		g.routes[routeNS], g.services[routeNS] = inf, svcs
	}
	go func() {
		<-ctx.Done()
		g.queue.ShutDown()
	}()
	for range o.workers {
		go g.work() // the queue hands one route to one worker at a time
	}
	return g, nil
}

func (g *Gateway) enqueue(obj any) {
	if r, ok := obj.(*gwapiv1.HTTPRoute); ok {
		g.queue.Add(cache.NewObjectName(r.Namespace, r.Name))
	}
}

// work reports on queued routes, retrying failures with backoff as a controller does.
func (g *Gateway) work() {
	for {
		name, shutdown := g.queue.Get()
		if shutdown {
			return
		}
		if err := g.report(name); err != nil {
			if g.ctx.Err() == nil {
				g.logf("stand-in gateway: route %s: %v (retrying)", name, err)
			}
			g.queue.AddRateLimited(name)
		} else {
			g.queue.Forget(name)
		}
		g.queue.Done(name)
	}
}

// Pause stops status reports.
func (g *Gateway) Pause() { g.paused.Store(true) }

// Resume reports again, catching up on every route.
func (g *Gateway) Resume() {
	g.paused.Store(false)
	for _, inf := range g.infs {
		for _, obj := range inf.GetStore().List() {
			g.enqueue(obj)
		}
	}
}

// Reject makes the gateway report the route namespace/name Accepted=False (reason
// NotAllowedByListeners) until Accept, as a gateway whose listeners stopped allowing it.
func (g *Gateway) Reject(namespace, name string) {
	key := cache.NewObjectName(namespace, name)
	g.rejected.Store(key, true)
	g.queue.Add(key)
}

// Accept ends what Reject began: the route is judged as any other again.
func (g *Gateway) Accept(namespace, name string) {
	key := cache.NewObjectName(namespace, name)
	g.rejected.Delete(key)
	g.queue.Add(key)
}

// report writes this controller's status for the route, unless paused.
func (g *Gateway) report(key cache.ObjectName) error {
	if g.paused.Load() {
		return nil
	}
	cached := true
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		route, err := g.route(key, cached)
		cached = false // after a conflict, the live route
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		next := route.DeepCopy()
		changed := false
		for _, ref := range route.Spec.ParentRefs {
			if g.serves(ref, route.Namespace) {
				changed = g.setParentStatus(next, ref) || changed
			}
		}
		if !changed {
			return nil
		}
		_, err = g.gw.GatewayV1().HTTPRoutes(key.Namespace).UpdateStatus(g.ctx, next, metav1.UpdateOptions{FieldManager: "stand-in-gateway"})
		return err
	})
}

// route is the route at key: the cached one when cached is set and the cache has it, else
// the live one.
func (g *Gateway) route(key cache.ObjectName, cached bool) (*gwapiv1.HTTPRoute, error) {
	if inf := g.routes[key.Namespace]; cached && inf != nil {
		if obj, ok, err := inf.GetStore().GetByKey(key.String()); err == nil && ok {
			if r, ok := obj.(*gwapiv1.HTTPRoute); ok {
				return r, nil
			}
		}
	}
	return g.gw.GatewayV1().HTTPRoutes(key.Namespace).Get(g.ctx, key.Name, metav1.GetOptions{})
}

// serviceExists reports whether Service namespace/name exists: in the cache, or, on a miss
// (the cache may lag the publisher's write just before the route), on the API server.
func (g *Gateway) serviceExists(namespace, name string) bool {
	if inf := g.services[namespace]; inf != nil {
		if _, ok, err := inf.GetStore().GetByKey(namespace + "/" + name); err == nil && ok {
			return true
		}
	}
	_, err := g.kube.CoreV1().Services(namespace).Get(g.ctx, name, metav1.GetOptions{})
	return !apierrors.IsNotFound(err)
}

func (g *Gateway) serves(ref gwapiv1.ParentReference, routeNS string) bool {
	return ptr.Deref(ref.Kind, "Gateway") == "Gateway" && ptr.Deref(ref.Group, gwapiv1.GroupName) == gwapiv1.GroupName &&
		string(ptr.Deref(ref.Namespace, gwapiv1.Namespace(routeNS))) == g.Namespace && string(ref.Name) == g.Name
}

// setParentStatus merges this controller's conditions into the route's status.parents entry
// for ref and reports whether anything changed.
func (g *Gateway) setParentStatus(route *gwapiv1.HTTPRoute, ref gwapiv1.ParentReference) bool {
	resolved := metav1.Condition{Type: string(gwapiv1.RouteConditionResolvedRefs), Status: metav1.ConditionTrue,
		Reason: string(gwapiv1.RouteReasonResolvedRefs), Message: "all backend references resolved", ObservedGeneration: route.Generation}
	for _, rule := range route.Spec.Rules {
		for _, b := range rule.BackendRefs {
			if ptr.Deref(b.Kind, "Service") != "Service" || ptr.Deref(b.Group, "") != "" {
				// Another kind (Envoy Gateway's Backend): the stand-in does not look it up;
				// the test that writes one checks the object itself.
				continue
			}
			if !g.serviceExists(route.Namespace, string(b.Name)) {
				resolved.Status, resolved.Reason = metav1.ConditionFalse, string(gwapiv1.RouteReasonBackendNotFound)
				resolved.Message = "service " + string(b.Name) + " not found"
			}
		}
	}
	accepted := metav1.Condition{Type: string(gwapiv1.RouteConditionAccepted), Status: metav1.ConditionTrue,
		Reason: string(gwapiv1.RouteReasonAccepted), Message: "accepted by the stand-in gateway", ObservedGeneration: route.Generation}
	if _, ok := g.rejected.Load(cache.NewObjectName(route.Namespace, route.Name)); ok {
		accepted.Status, accepted.Reason = metav1.ConditionFalse, string(gwapiv1.RouteReasonNotAllowedByListeners)
		accepted.Message = "rejected by the stand-in gateway (Reject)"
	}

	idx := -1
	for i, p := range route.Status.Parents {
		if p.ControllerName == ControllerName && sameRef(p.ParentRef, ref) {
			idx = i
		}
	}
	if idx < 0 {
		route.Status.Parents = append(route.Status.Parents, gwapiv1.RouteParentStatus{ParentRef: ref, ControllerName: ControllerName})
		idx = len(route.Status.Parents) - 1
	}
	conds := &route.Status.Parents[idx].Conditions
	added := len(*conds) == 0
	changed := meta.SetStatusCondition(conds, accepted)
	changed = meta.SetStatusCondition(conds, resolved) || changed
	return changed || added
}

func sameRef(a, b gwapiv1.ParentReference) bool {
	return a.Name == b.Name && ptr.Deref(a.Namespace, "") == ptr.Deref(b.Namespace, "") &&
		ptr.Deref(a.SectionName, "") == ptr.Deref(b.SectionName, "")
}
