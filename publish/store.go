package publish

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
)

// informerFor returns the informer among infs that covers namespace, or nil.
func (p *Publisher) informerFor(infs []cache.SharedIndexInformer, namespace string) cache.SharedIndexInformer {
	if len(infs) == 0 { // a sink that is off has no informers
		return nil
	}
	for i, scope := range p.scopes {
		if scope == "" || scope == namespace {
			return infs[i]
		}
	}
	return nil
}

// cached returns the cached object at namespace/name as a T, or the zero T when absent.
func cached[T any](p *Publisher, infs []cache.SharedIndexInformer, namespace, name string) (T, error) {
	var zero T
	inf := p.informerFor(infs, namespace)
	if inf == nil {
		return zero, nil
	}
	obj, ok, err := inf.GetIndexer().GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return zero, err
	}
	t, ok := obj.(T)
	if !ok {
		return zero, fmt.Errorf("cache holds %T at %s/%s", obj, namespace, name)
	}
	return t, nil
}

func (p *Publisher) trafficMap(namespace, name string) (*v1beta1.TrafficMap, error) {
	return cached[*v1beta1.TrafficMap](p, p.maps, namespace, name)
}

func (p *Publisher) inferenceService(namespace, name string) (*metav1.PartialObjectMetadata, error) {
	return cached[*metav1.PartialObjectMetadata](p, p.isvcs, namespace, name)
}

// store is the httproute.Store backed by the informer caches.
type store struct{ p *Publisher }

var _ httproute.Store = store{}

// Route implements httproute.Store.
func (s store) Route(namespace, name string) (*gwapiv1.HTTPRoute, error) {
	return cached[*gwapiv1.HTTPRoute](s.p, s.p.routes, namespace, name)
}

// Services implements httproute.Store.
func (s store) Services(src httproute.Source) ([]*corev1.Service, error) {
	inf := s.p.informerFor(s.p.services, src.Namespace)
	if inf == nil {
		return nil, nil
	}
	objs, err := inf.GetIndexer().ByIndex(indexBySource, src.Namespace+"/"+src.Name)
	if err != nil {
		return nil, fmt.Errorf("list cached services: %w", err)
	}
	var out []*corev1.Service
	for _, o := range objs {
		if svc, ok := o.(*corev1.Service); ok && httproute.Owned(svc.Labels, src) {
			out = append(out, svc)
		}
	}
	return out, nil
}

// indexServiceBySource indexes an owned Service by its TrafficMap's namespace/name, so a
// reconcile reads its map's Services without scanning every Service of the namespace.
func indexServiceBySource(obj any) ([]string, error) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return nil, nil
	}
	src, ok := httproute.SourceOf(svc.Labels)
	if !ok {
		return nil, nil
	}
	return []string{src.Namespace + "/" + src.Name}, nil
}
