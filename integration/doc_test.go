// Package integration runs the publisher in-process against a real kube-apiserver and etcd
// (started once per package by controller-runtime's envtest) with the project's CRDs from
// charts/ and Gateway API's standard CRDs from the gateway-api module.
//
// Two third parties cannot run here, so each has a named stand-in that behaves as the real
// one is documented to: standInGateway writes HTTPRoute status the way a Gateway API
// controller must (status.parents keyed by parentRef and controllerName, conditions at the
// route's generation), and standInRouting writes TrafficMap spec and its routing conditions
// the way OME's routing controller does (field manager ome-trafficmap-routing).
package integration
