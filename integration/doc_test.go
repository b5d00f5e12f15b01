// Package integration runs the publisher in-process against a real kube-apiserver and etcd
// (started once per package by controller-runtime's envtest) with the project's CRDs from
// charts/ and Gateway API's standard CRDs from the gateway-api module.
//
// Third parties that cannot run here each have a named stand-in (package standin) that
// behaves as the real one is documented to: standInGateway writes HTTPRoute status the way a Gateway API
// controller must (status.parents keyed by parentRef and controllerName, conditions at the
// route's generation), standInRouting writes TrafficMap spec and its routing conditions
// the way OME's routing controller does (field manager ome-trafficmap-routing); and
// standin.OMEPublisher leaves a map as OME's built-in gatewayapi publisher publishes it, for
// the migration tests.
package integration
