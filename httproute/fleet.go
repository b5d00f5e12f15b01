package httproute

import (
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/weights"
)

// Annotations recording, on the route, the last valid fleet-drain inputs the weights were
// computed with, so that a malformed taint or toleration list keeps the same state, also
// across publisher restarts.
const (
	// AnnotationClusterTaints records the NoExecute taints of every entry cluster, as a JSON
	// object keyed by cluster whose values are taint lists ([] for an untainted cluster).
	AnnotationClusterTaints = "publisher.trafficmap.dev/cluster-taints"
	// AnnotationServiceTolerations records the service's tolerations as a JSON list.
	AnnotationServiceTolerations = "publisher.trafficmap.dev/service-tolerations"
)

// RecordedTaints returns the per-cluster taints recorded on a route built by Build, and
// whether the route carried a valid record. Each list is parsed with weights.ParseTaints.
func RecordedTaints(route *gwapiv1.HTTPRoute) (map[string][]weights.Taint, bool) {
	if route == nil {
		return nil, false
	}
	v, ok := route.Annotations[AnnotationClusterTaints]
	if !ok {
		return nil, false
	}
	out, err := weights.ParseClusterTaints(v)
	if err != nil {
		return nil, false
	}
	return out, true
}

// RecordedTolerations returns the tolerations recorded on a route built by Build, and
// whether the route carried a valid record.
func RecordedTolerations(route *gwapiv1.HTTPRoute) ([]weights.Toleration, bool) {
	if route == nil {
		return nil, false
	}
	v, ok := route.Annotations[AnnotationServiceTolerations]
	if !ok {
		return nil, false
	}
	tols, err := weights.ParseTolerations(v)
	if err != nil {
		return nil, false
	}
	return tols, true
}

// Recorded returns the fallback state recorded on a route built by Build (its drains,
// cluster taints and tolerations annotations); a nil route records nothing.
func Recorded(route *gwapiv1.HTTPRoute) model.Recorded {
	if route == nil {
		return model.Recorded{}
	}
	return model.RecordedFrom(route.Annotations, AnnotationDrains, AnnotationClusterTaints, AnnotationServiceTolerations)
}
