package publish

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
)

// Step 1 of the pipeline: gather one map's inputs from the caches.

// gathered is everything one map's plan is made from, read from the caches: the reconcile
// and the xDS sink's rebuilds both plan from it, so they cannot disagree.
type gathered struct {
	isvc       *metav1.PartialObjectMetadata
	globalHost string
	inputs     Inputs // Route is the publisher's own route, or nil
	// claims are the other maps' claims that decide which of the map's names it owns
	// (Caches.claims); foreign are the claims of foreign routes on the same Gateway
	// listener that overlap its names.
	claims, foreign []Claim
	// publisher is the publisherName whose journals count; policy decides which hostname
	// the map's namespace may claim.
	publisher string
	policy    ClaimPolicy
}

// gather reads the map's inputs from the caches. A foreign route at the map's route name
// is not trusted: Inputs.Route is then nil. With the HTTPRoute sink off, Inputs.Recorded is
// the map's owned record ConfigMap (empty when there is none). A missing or replaced InferenceService is a
// *userError (ReasonSourceNotFound); any other error is transient.
func (c *caches) gather(tm *v1beta1.TrafficMap) (gathered, error) {
	isvc, err := c.inferenceService(tm.Namespace, tm.Spec.Service)
	if err != nil {
		return gathered{}, err
	}
	if isvc == nil {
		return gathered{}, &userError{reason: ReasonSourceNotFound, message: fmt.Sprintf(
			"inferenceservice %s/%s named by trafficmap %s/%s spec.service does not exist; the published route is left as it was",
			tm.Namespace, tm.Spec.Service, tm.Namespace, tm.Name)}
	}
	if tm.Status.SourceUID != "" && tm.Status.SourceUID != isvc.UID {
		return gathered{}, &userError{reason: ReasonSourceNotFound, message: fmt.Sprintf(
			"inferenceservice %s/%s has uid %s but trafficmap %s/%s status.sourceUID is %s; waiting for the routing controller",
			isvc.Namespace, isvc.Name, isvc.UID, tm.Namespace, tm.Name, tm.Status.SourceUID)}
	}
	src := httproute.Source{Namespace: tm.Namespace, Name: tm.Name, Service: tm.Spec.Service}
	route, err := c.Route(tm.Namespace, httproute.RouteName(tm.Name))
	if err != nil {
		return gathered{}, err
	}
	if route != nil && !httproute.Owned(route.Labels, src) {
		route = nil
	}
	in := Inputs{TrafficMap: tm, SourceAnnotations: isvc.Annotations, Route: route}
	if len(c.records) > 0 {
		rec, err := c.record(tm.Namespace, RecordName(tm.Name))
		if err != nil {
			return gathered{}, err
		}
		fb := Recorded{}
		if rec != nil && httproute.Owned(rec.Labels, src) {
			fb = RecordedFromData(rec.Data)
		}
		in.Recorded = &fb
	}
	clusters, err := c.clusterTaints(tm)
	if err != nil {
		return gathered{}, err
	}
	in.Clusters = clusters
	self := c.mapClaim(tm, isvc)
	return gathered{
		isvc:       isvc,
		globalHost: strings.TrimSpace(isvc.Annotations[v1beta1.AnnotationGlobalHost]),
		inputs:     in,
		claims:     c.claims(self),
		foreign:    c.foreignClaims(tm.Namespace, self.Names),
		publisher:  c.publisher,
		policy:     c.policy,
	}, nil
}
