package xds

import (
	"strings"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

func TestCodecRoundTripsAndPoolsOnlySmallMessages(t *testing.T) {
	c := newCodec()
	assert.Equal(t, "proto", c.Name())
	for _, tc := range []struct {
		name   string
		size   int
		pooled bool
	}{
		{"ack", 100, false}, // below grpc-go's pooling threshold: never pooled
		{"a map's resources", 8 << 10, true},
		{"at the limit", pooledMax - 64, true},
		{"the fleet's route configuration", 6 << 20, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := &discoveryv3.DiscoveryResponse{VersionInfo: "v1",
				Resources: []*anypb.Any{{TypeUrl: "t", Value: []byte(strings.Repeat("x", tc.size))}}}
			data, err := c.Marshal(msg)
			require.NoError(t, err)
			defer data.Free()
			var got discoveryv3.DiscoveryResponse
			require.NoError(t, c.Unmarshal(data, &got))
			assert.True(t, proto.Equal(msg, &got))
			require.Len(t, data, 1)
			_, fresh := data[0].(mem.SliceBuffer)
			assert.Equal(t, !tc.pooled, fresh, "pooled buffer for %d bytes", tc.size)
		})
	}
	_, err := c.Marshal("not a message")
	assert.Error(t, err)
}
