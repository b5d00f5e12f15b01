// Package tmclient is a typed client for OME TrafficMaps (ome.io/v1beta1).
//
// It is built on client-go's generic typed client (k8s.io/client-go/gentype),
// the same code that generated clientsets wrap, so the project needs no
// client-gen output. Its methods have the signatures of a generated typed
// client, minus server-side apply (there are no apply configurations).
package tmclient
