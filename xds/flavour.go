package xds

import (
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/trafficmap/publisher/model"
)

// Flavour is the kind of xDS client a node is, which decides the resources it gets
// (model.Flavour, part of the /debug/xds wire format).
type Flavour = model.Flavour

// Flavours.
const (
	FlavourEnvoy = model.FlavourEnvoy
	FlavourGRPC  = model.FlavourGRPC
)

// FlavourMetadataKey, in a node's metadata, overrides the flavour read from the user agent.
const FlavourMetadataKey = "trafficmap.dev/flavour"

// FlavourOf returns a node's flavour: the FlavourMetadataKey metadata value when it is
// "envoy" or "grpc", else gRPC for a gRPC library's user agent ("gRPC Go", "gRPC C++", ...),
// else Envoy.
func FlavourOf(node *corev3.Node) Flavour {
	if v := node.GetMetadata().GetFields()[FlavourMetadataKey].GetStringValue(); v == string(FlavourEnvoy) || v == string(FlavourGRPC) {
		return Flavour(v)
	}
	if strings.HasPrefix(strings.ToLower(node.GetUserAgentName()), "grpc") {
		return FlavourGRPC
	}
	return FlavourEnvoy
}

// NodeHash keys the snapshot cache by flavour, so every node of a flavour shares one
// snapshot.
type NodeHash struct{}

// ID implements the snapshot cache's NodeHash.
func (NodeHash) ID(node *corev3.Node) string { return string(FlavourOf(node)) }
