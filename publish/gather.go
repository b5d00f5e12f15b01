package publish

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/model"
)

// Step 1 of the pipeline: gather one map's inputs from the caches into a model.Gathered,
// the plain struct the pure plan step (model.PlanMap) reads.

// gather reads the map's inputs from the caches. A foreign route at the map's route name
// is not trusted: it records nothing and has no creation time; but a route OME's publisher
// wrote for the map, while the publisher adopts from OME (httproute.AdoptOME), is the map's
// route: its creation time counts and it is no foreign claim on the map's hostname. With the HTTPRoute sink off,
// Inputs.Recorded is the map's owned record ConfigMap (empty when there is none). A missing
// or replaced InferenceService is a *model.UserError (ReasonSourceNotFound); any other
// error is transient. The hostname is derived by the plan step's caller (planMap).
func (c *caches) gather(tm *v1beta1.TrafficMap) (model.Gathered, error) {
	isvc, err := c.inferenceService(tm.Namespace, tm.Spec.Service)
	if err != nil {
		return model.Gathered{}, err
	}
	if isvc == nil {
		return model.Gathered{}, &model.UserError{Reason: model.ReasonSourceNotFound, Message: fmt.Sprintf(
			"inferenceservice %s/%s named by trafficmap %s/%s spec.service does not exist; the published route is left as it was",
			tm.Namespace, tm.Spec.Service, tm.Namespace, tm.Name)}
	}
	if tm.Status.SourceUID != "" && tm.Status.SourceUID != isvc.UID {
		return model.Gathered{}, &model.UserError{Reason: model.ReasonSourceNotFound, Message: fmt.Sprintf(
			"inferenceservice %s/%s has uid %s but trafficmap %s/%s status.sourceUID is %s; waiting for the routing controller",
			isvc.Namespace, isvc.Name, isvc.UID, tm.Namespace, tm.Name, tm.Status.SourceUID)}
	}
	src := httproute.Source{Namespace: tm.Namespace, Name: tm.Name, Service: tm.Spec.Service}
	route, err := c.Route(tm.Namespace, httproute.RouteName(tm.Name))
	if err != nil {
		return model.Gathered{}, err
	}
	adopted := route != nil && httproute.AdoptionOf(route.Labels, src, c.adoptOME) == httproute.AdoptOME
	if route != nil && !httproute.Owned(route.Labels, src) && !adopted {
		route = nil
	}
	in := model.Inputs{TrafficMap: tm, SourceAnnotations: isvc.Annotations, Recorded: httproute.Recorded(route)}
	if len(c.records) > 0 {
		rec, err := c.record(tm.Namespace, RecordName(tm.Name))
		if err != nil {
			return model.Gathered{}, err
		}
		in.Recorded = model.Recorded{}
		if rec != nil && httproute.Owned(rec.Labels, src) {
			in.Recorded = model.RecordedFromData(rec.Data)
		}
	}
	if in.Clusters, err = c.sources.clusterTaints(tm); err != nil {
		return model.Gathered{}, err
	}
	self := c.mapClaim(tm, isvc)
	return model.Gathered{
		Evidence:     c.evidence(tm),
		Source:       isvc,
		GlobalHost:   strings.TrimSpace(isvc.Annotations[v1beta1.AnnotationGlobalHost]),
		Inputs:       in,
		RouteCreated: routeCreated(route),
		Claims:       c.owners.claims(self),
		Foreign:      c.owners.foreignClaims(tm.Namespace, self.Names, adoptedRoute(route, adopted)),
		Policy:       c.policy,
	}, nil
}

// adoptedRoute is route's key when adopted, nil otherwise.
func adoptedRoute(route *gwapiv1.HTTPRoute, adopted bool) *types.NamespacedName {
	if !adopted {
		return nil
	}
	key := model.KeyOf(route)
	return &key
}
