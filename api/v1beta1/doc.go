// Package v1beta1 holds the Go types of OME's TrafficMap custom resource
// (ome.io/v1beta1), as read by the publisher.
//
// The schema mirrors OME's own CRD field for field, so that the CRD generated
// from these types (config/crd/ome.io_trafficmaps.yaml) accepts
// every object OME writes. The routing controller owns spec and the routing
// part of status; a publisher owns only its own status fields, written by
// server-side apply under its own field manager.
//
// Deep-copy functions are generated into zz_generated.deepcopy.go, and the
// typed client (clientset, listers, informers, apply configurations) into
// api/client, by hack/generate.sh; do not edit either.
//
// +kubebuilder:object:generate=true
// +groupName=ome.io
package v1beta1
