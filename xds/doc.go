// Package xds is reserved for the xDS sink (an Envoy and proxyless-gRPC xDS server serving
// the same effective weights). It holds no code yet; the publisher has only the HTTPRoute
// sink until the xDS sink issue is done.
package xds
