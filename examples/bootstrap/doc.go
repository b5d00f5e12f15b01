// Package bootstrap holds the bootstrap files an xDS-only deployment of the publisher needs:
// envoy.yaml for Envoy and grpc-bootstrap.json for proxyless gRPC clients
// (GRPC_XDS_BOOTSTRAP). It has no code; its tests check the files (the gRPC one is also
// loaded by a real grpc-go xDS client in the integration tests).
package bootstrap
