package xds

import (
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestMarshalShared: a response marshalled with its encodings referenced in place is byte
// for byte what proto.Marshal gives, references the large encodings without copying them,
// and leaves alone what it cannot encode exactly.
func TestMarshalShared(t *testing.T) {
	big := []byte(strings.Repeat("r", 4096))
	small := []byte("tiny")
	anyOf := func(v []byte) *anypb.Any { return &anypb.Any{TypeUrl: "type.googleapis.com/x", Value: v} }
	cp := &corev3.ControlPlane{Identifier: "publisher"}
	for name, msg := range map[string]proto.Message{
		"state of the world": &discoveryv3.DiscoveryResponse{VersionInfo: "v7", TypeUrl: "type.googleapis.com/x", Nonce: "3",
			Canary: true, ControlPlane: cp, Resources: []*anypb.Any{anyOf(big), anyOf(small), anyOf(nil), {}, anyOf(big)}},
		"state of the world without a version": &discoveryv3.DiscoveryResponse{Resources: []*anypb.Any{anyOf(big)}},
		"delta": &discoveryv3.DeltaDiscoveryResponse{SystemVersionInfo: "s1", TypeUrl: "type.googleapis.com/x", Nonce: "9",
			RemovedResources: []string{"gone"}, ControlPlane: cp, Resources: []*discoveryv3.Resource{
				{Name: "a", Version: "va", Resource: anyOf(big), Aliases: []string{"x"}, Ttl: durationpb.New(5)},
				{Name: "b", Resource: anyOf(small)},
				{Name: "c", Version: "vc"},
			}},
	} {
		t.Run(name, func(t *testing.T) {
			data, ok, err := marshalShared(msg)
			require.NoError(t, err)
			require.True(t, ok)
			want, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
			require.NoError(t, err)
			assert.Equal(t, want, data.Materialize())
			referenced := 0
			for _, b := range data {
				if len(b.ReadOnlyData()) == len(big) && &b.ReadOnlyData()[0] == &big[0] {
					referenced++
				}
			}
			assert.Positive(t, referenced, "the large encoding is referenced, not copied")
		})
	}
	t.Run("other messages are not its", func(t *testing.T) {
		_, ok, err := marshalShared(&discoveryv3.DiscoveryRequest{VersionInfo: "v"})
		assert.NoError(t, err)
		assert.False(t, ok)
	})
	t.Run("an encoding with unknown fields is marshalled whole", func(t *testing.T) {
		a := anyOf(big)
		a.ProtoReflect().SetUnknown([]byte{0x18, 0x01}) // field 3, varint 1
		_, ok, err := marshalShared(&discoveryv3.DiscoveryResponse{Resources: []*anypb.Any{a}})
		assert.NoError(t, err)
		assert.False(t, ok)
	})
}
