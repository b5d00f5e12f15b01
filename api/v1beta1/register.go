package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of OME's resources.
const GroupName = "ome.io"

// SchemeGroupVersion is the group and version of the types in this package.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1beta1"}

var (
	// SchemeBuilder collects the functions that register this package's types
	// with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme registers TrafficMap and TrafficMapList, plus the metav1
	// option types for this group version, with a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// TrafficMapsResource is the group-version-resource of TrafficMaps.
var TrafficMapsResource = SchemeGroupVersion.WithResource("trafficmaps")

// InferenceServicesResource is the group-version-resource of OME
// InferenceServices, the owners of TrafficMaps. This package has no Go type
// for them; use a dynamic or metadata client.
var InferenceServicesResource = SchemeGroupVersion.WithResource("inferenceservices")

// Resource returns the group-qualified resource for an unqualified resource
// name, as used in API errors.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion,
		&TrafficMap{},
		&TrafficMapList{},
	)
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}
