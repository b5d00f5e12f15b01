package publish

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/cache"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/resolve"
)

// classRefresh is how often gatewayClasses re-reads the GatewayClass controllerName of every
// Gateway it was asked about; a change requeues every map.
const classRefresh = 30 * time.Second

// gatewayClasses answers, for --backend-kind auto, the controllerName of a Gateway's
// GatewayClass: a bounded cached read (a GET of the Gateway and of its GatewayClass per
// Gateway and refresh, not an informer: the publisher asks about one Gateway, or one per
// namespace). run re-reads them every classRefresh and calls changed when an answer
// changed. A failed read keeps the last answer; without one it is an error (the sink then
// keeps the stored route rather than switching kinds). mu guards known.
type gatewayClasses struct {
	gw      gwclient.Interface
	changed func()

	mu    sync.Mutex
	known map[types.NamespacedName]string // controllerName, "" when the Gateway or class is absent
}

func newGatewayClasses(gw gwclient.Interface, changed func()) *gatewayClasses {
	return &gatewayClasses{gw: gw, changed: changed, known: map[types.NamespacedName]string{}}
}

// controllerName implements httproute.ControllerNames.
func (g *gatewayClasses) controllerName(gw types.NamespacedName) (string, error) {
	g.mu.Lock()
	name, ok := g.known[gw]
	g.mu.Unlock()
	if ok {
		return name, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	name, err := g.read(ctx, gw)
	if err != nil {
		return "", err
	}
	g.mu.Lock()
	g.known[gw] = name
	g.mu.Unlock()
	return name, nil
}

// read GETs gw and its GatewayClass: "" when either does not exist.
func (g *gatewayClasses) read(ctx context.Context, gw types.NamespacedName) (string, error) {
	gateway, err := g.gw.GatewayV1().Gateways(gw.Namespace).Get(ctx, gw.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read gateway %s: %w", gw, err)
	}
	class, err := g.gw.GatewayV1().GatewayClasses().Get(ctx, string(gateway.Spec.GatewayClassName), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read gatewayclass %s: %w", gateway.Spec.GatewayClassName, err)
	}
	return string(class.Spec.ControllerName), nil
}

// run re-reads every known Gateway's class each classRefresh until ctx ends and calls
// changed once per round in which an answer changed.
func (g *gatewayClasses) run(ctx context.Context) {
	t := time.NewTicker(classRefresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if g.refresh(ctx) {
			g.changed()
		}
	}
}

// refresh re-reads every known Gateway's class and reports whether an answer changed (a
// failed read keeps the last answer).
func (g *gatewayClasses) refresh(ctx context.Context) bool {
	g.mu.Lock()
	gws := make([]types.NamespacedName, 0, len(g.known))
	for gw := range g.known {
		gws = append(gws, gw)
	}
	g.mu.Unlock()
	changed := false
	for _, gw := range gws {
		name, err := g.read(ctx, gw)
		if err != nil {
			continue
		}
		g.mu.Lock()
		if g.known[gw] != name {
			g.known[gw], changed = name, true
		}
		g.mu.Unlock()
	}
	return changed
}

// envoyBackendsServed reports whether the API server serves Envoy Gateway's Backend API
// (read once at start; a discovery error counts as not served).
func envoyBackendsServed(d discovery.DiscoveryInterface) bool {
	gv := httproute.EnvoyBackendGVR.GroupVersion().String()
	list, err := d.ServerResourcesForGroupVersion(gv)
	if err != nil {
		return false
	}
	for _, r := range list.APIResources {
		if r.Name == httproute.EnvoyBackendGVR.Resource {
			return true
		}
	}
	return false
}

// newResolver returns the hostname cache of the endpointslice backend kind: a change of a
// map's hostname addresses (or of their failing) enqueues the map, nothing more.
func newResolver(cfg Config, p *Publisher) *resolve.Cache {
	return resolve.New(resolve.Config{Interval: cfg.ResolveInterval, MinTTL: cfg.ResolveMinTTL, MaxTTL: cfg.ResolveMaxTTL,
		Log: p.log.Named("resolve")}, func(owners []string) {
		for _, key := range owners {
			if ns, name, err := cache.SplitMetaNamespaceKey(key); err == nil {
				p.enqueue(bulkPriority, ns, name)
			}
		}
	})
}
