package httproute

// readLabels are the label keys the package reads on a stored route or Service: the
// ownership labels (Owned, SourceOf, Managed), the cluster label a backend Service is built
// with (Matches compares every label Build sets) and OME's ownership labels (AdoptionOf,
// OMEOwned).
var readLabels = map[string]bool{
	LabelManagedBy: true, LabelSourceNamespace: true, LabelSourceName: true, LabelCluster: true,
	LabelOMEManagedBy: true, LabelOMESourceName: true, LabelOMESourceNS: true, LabelOMEPlacementCluster: true,
}

// readAnnotations are the annotation keys the package reads on a stored route: every
// annotation Build sets for any backend kind (Matches; a key missing here would make every
// Sync of a route carrying it write the route again), the records (Recorded) and the
// backend kind the stored route uses (routeKind).
var readAnnotations = map[string]bool{
	AnnotationDrains: true, AnnotationTrafficMapGeneration: true,
	AnnotationClusterTaints: true, AnnotationServiceTolerations: true,
	AnnotationBackendKind: true,
}

// ReadsLabel reports whether the package reads the label key of a stored HTTPRoute or
// Service (Store's objects): a cache may drop every other label without changing what the
// package decides or writes.
func ReadsLabel(key string) bool { return readLabels[key] }

// ReadsAnnotation reports whether the package reads the annotation key of a stored
// HTTPRoute: a cache may drop every other annotation without changing what the package
// decides or writes. It reads no annotation of a Service.
func ReadsAnnotation(key string) bool { return readAnnotations[key] }
