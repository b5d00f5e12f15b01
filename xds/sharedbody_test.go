package xds

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// sharedList is a list of n resources of about 200 bytes each, one of them empty.
func sharedList(n int) []*anypb.Any {
	list := make([]*anypb.Any, 0, n)
	for i := range n {
		v := []byte(fmt.Sprintf("%04d%s", i, strings.Repeat("c", 200)))
		if i == 7 {
			v = nil
		}
		list = append(list, &anypb.Any{TypeUrl: "type.googleapis.com/envoy.config.cluster.v3.Cluster", Value: v})
	}
	return list
}

// largest is the first byte of data's largest buffer.
func largest(data mem.BufferSlice) *byte {
	var big []byte
	for _, b := range data {
		if len(b.ReadOnlyData()) > len(big) {
			big = b.ReadOnlyData()
		}
	}
	return &big[0]
}

func TestSharedBody(t *testing.T) {
	list := sharedList(bodyMin + 10)
	sharedBodies.register(list)
	responses := []*discoveryv3.DiscoveryResponse{
		{VersionInfo: "v1", TypeUrl: "type.googleapis.com/envoy.config.cluster.v3.Cluster", Nonce: "1", Resources: list},
		{VersionInfo: "v1", TypeUrl: "type.googleapis.com/envoy.config.cluster.v3.Cluster", Nonce: "2", Resources: list},
		{Nonce: "3", Resources: list},
	}
	var first *byte
	for i, r := range responses {
		data, ok, err := marshalShared(r)
		require.NoError(t, err)
		require.True(t, ok)
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(r)
		require.NoError(t, err)
		assert.Equal(t, want, data.Materialize(), "response %d", i)
		assert.LessOrEqual(t, len(data), 3, "the version, the shared body, the tail")
		if first == nil {
			first = largest(data)
		}
		assert.Same(t, first, largest(data), "every response over the list references one body")
		runtime.KeepAlive(data)
	}

	t.Run("a list not registered is framed per response", func(t *testing.T) {
		other := append([]*anypb.Any(nil), list...)
		r := &discoveryv3.DiscoveryResponse{VersionInfo: "v1", Resources: other}
		data, ok, err := marshalShared(r)
		require.NoError(t, err)
		require.True(t, ok)
		want, err := proto.Marshal(r)
		require.NoError(t, err)
		assert.Equal(t, want, data.Materialize())
		assert.Greater(t, len(data), len(other), "framed per resource")
	})
}

func TestBodyCacheHoldsNothingAtRest(t *testing.T) {
	c := &bodyCache{bodies: map[listKey]body{}}
	list := sharedList(bodyMin)
	c.register(list)
	// encoded is a copy of list's body: the body itself is referenced by nothing after it.
	encoded := func() []byte {
		b, ok := c.get(list)
		require.True(t, ok)
		return append([]byte(nil), b...)
	}
	want := encoded()
	runtime.GC()
	require.Nil(t, c.bodies[listKeyOf(list)].first.Value(), "no response holds the body: it is collected")
	assert.Equal(t, want, encoded(), "encoded again, the same bytes")

	short := sharedList(bodyMin - 1)
	c.register(short)
	_, ok := c.get(short)
	assert.False(t, ok, "a short list is framed per response")

	list = nil
	runtime.GC()
	c.register(sharedList(bodyMin))
	assert.Len(t, c.bodies, 1, "the collected list is forgotten")
}
